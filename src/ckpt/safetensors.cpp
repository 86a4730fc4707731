// safetensors serialisation.
#include "ckpt/safetensors.h"

#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors_header.h"
#include "core/error.h"
#include "core/file_util.h"

namespace cadre {
namespace {

const char* dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    default: return nullptr;
  }
}

std::optional<at::ScalarType> dtype_from_code(const std::string& code) {
  if (code == "F32") return at::kFloat;
  if (code == "BF16") return at::kBFloat16;
  if (code == "F16") return at::kHalf;
  if (code == "I64") return at::kLong;
  if (code == "I32") return at::kInt;
  return std::nullopt;
}

}  // namespace

void safetensors_write(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const char* code = dtype_code(t.scalar_type());
    CADRE_CHECK(code, "safetensors '", path, "': tensor '", name, "' has unsupported dtype ", t.scalar_type());
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    uint64_t bytes = c.numel() * c.element_size();
    header[name] = {{"dtype", code}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string blob(8, '\0');
  uint64_t n = text.size();
  std::memcpy(blob.data(), &n, 8);  // little-endian host
  blob += text;
  blob.reserve(blob.size() + offset);
  for (const auto& c : contiguous) blob.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  file_write_atomic(path, blob);
}

std::map<std::string, at::Tensor> safetensors_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(str("cannot open safetensors file '", path, "'"));
  std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  for (const SafetensorsEntry& e : safetensors_parse_header(blob, path)) {
    const auto dtype = dtype_from_code(e.dtype);
    if (!dtype)
      throw SafetensorsError(str("safetensors file '", path, "': tensor '", e.name, "' has dtype ", e.dtype,
                                 ", which Cadre does not read (F32, BF16, F16, I64, I32)"));
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(*dtype));
    std::memcpy(t.data_ptr(), blob.data() + e.begin, e.end - e.begin);  // sizes checked by the parser
    out[e.name] = t;
  }
  return out;
}

}  // namespace cadre
