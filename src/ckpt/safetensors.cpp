// safetensors serialisation: a streamed writer and a whole-file reader.
#include "ckpt/safetensors.h"

#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors_header.h"
#include "core/error.h"
#include "core/file_util.h"

namespace cadre {
namespace {

std::optional<at::ScalarType> dtype_from_code(const std::string& code) {
  if (code == "F32") return at::kFloat;
  if (code == "BF16") return at::kBFloat16;
  if (code == "F16") return at::kHalf;
  if (code == "I64") return at::kLong;
  if (code == "I32") return at::kInt;
  return std::nullopt;
}

}  // namespace

const char* safetensors_dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    default: throw Error(str("safetensors: dtype ", t, " is not written (float32, bfloat16, float16, int64, int32)"));
  }
}

uint64_t SafetensorsTensor::bytes() const {
  uint64_t n = at::elementSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(std::string path, const std::vector<SafetensorsTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : file_(std::move(path)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsTensor& t : tensors) {
    CADRE_CHECK(!header.contains(t.name), "safetensors '", file_.path(), "': tensor '", t.name, "' listed twice");
    const uint64_t bytes = t.bytes();
    header[t.name] = {{"dtype", safetensors_dtype_code(t.dtype)}, {"shape", t.shape},
                      {"data_offsets", {expected_, expected_ + bytes}}};
    expected_ += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = text.size();
  file_.write(&n, 8);  // little-endian host
  file_.write(text.data(), text.size());
}

void SafetensorsWriter::write(const void* data, uint64_t bytes) {
  CADRE_CHECK(written_ + bytes <= expected_, "safetensors '", file_.path(), "': ", written_ + bytes,
              " bytes of tensor data written, its header lists ", expected_);
  file_.write(data, bytes);
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  CADRE_CHECK(written_ == expected_, "safetensors '", file_.path(), "': ", written_, " bytes of tensor data written, its header lists ",
              expected_);
  file_.commit();
}

void safetensors_write(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensor> list;
  for (const auto& [name, t] : tensors) list.push_back({name, t.scalar_type(), t.sizes().vec()});
  SafetensorsWriter writer(path, list, metadata);
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    writer.write(c.data_ptr(), c.numel() * c.element_size());
  }
  writer.finish();
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
