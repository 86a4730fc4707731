// safetensors header parsing with bounds and overflow checks (see safetensors_header.h).
#include "ckpt/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/json_number.h"

namespace cadre {
namespace {

// A header bigger than this is damage, not a model (real ones are a few hundred KB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

SafetensorsError damaged(const std::string& path, const std::string& why) {
  return SafetensorsError(str("safetensors file '", path, "': ", why));
}

// dtype, shape and data_offsets of one entry, as written (offsets relative to the data section).
SafetensorsEntry entry_fields(const std::string& name, const nlohmann::json& info, const std::string& path) {
  SafetensorsEntry e;
  e.name = name;
  try {
    e.dtype = info.at("dtype").get<std::string>();
    e.shape = json_int_list(info.at("shape"), "shape");
    const auto& range = info.at("data_offsets");
    if (!range.is_array() || range.size() != 2)
      throw damaged(path, str("tensor '", name, "': data_offsets must be [begin, end]"));
    e.begin = json_uint(range[0], "data_offsets");
    e.end = json_uint(range[1], "data_offsets");
  } catch (const SafetensorsError&) {
    throw;
  } catch (const nlohmann::json::exception& ex) {
    throw damaged(path, str("tensor '", name, "': malformed entry in the header (", ex.what(), ")"));
  } catch (const Error& ex) {
    throw damaged(path, str("tensor '", name, "': malformed entry in the header (", ex.what(), ")"));
  }
  return e;
}

// The entry's dtype is one safetensors defines, its range lies in the data section (of
// `data_size` bytes, starting at `data_start`) and holds exactly its shape; offsets made absolute.
void check_entry(SafetensorsEntry& e, uint64_t data_start, uint64_t data_size, const std::string& path) {
  const int64_t elem = safetensors_element_size(e.dtype);
  if (elem == 0) throw damaged(path, str("tensor '", e.name, "': unsupported dtype ", e.dtype, " (not a safetensors code)"));
  for (int64_t d : e.shape)
    if (d < 0) throw damaged(path, str("tensor '", e.name, "': its shape has a negative dimension"));
  const auto numel = checked_numel(e.shape);
  const auto bytes = numel ? checked_mul(*numel, elem) : std::nullopt;
  if (!bytes) throw damaged(path, str("tensor '", e.name, "': its shape overflows"));
  if (e.begin > e.end) throw damaged(path, str("tensor '", e.name, "': data_offsets ", e.begin, "..", e.end, " end before they begin"));
  if (e.end > data_size)
    throw damaged(path, str("tensor '", e.name, "' claims bytes ", e.begin, "..", e.end,
                            " of the data section, outside the file, which holds only ", data_size, " (truncated?)"));
  if (e.end - e.begin != static_cast<uint64_t>(*bytes))
    throw damaged(path, str("tensor '", e.name, "': ", e.end - e.begin, " bytes do not match its shape of ", *numel, " ",
                            e.dtype, " elements (", *bytes, " bytes)"));
  e.begin += data_start;
  e.end += data_start;
}

}  // namespace

int64_t safetensors_element_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64" || dtype == "C64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2" ||
      dtype == "F8_E8M0")
    return 1;
  return 0;
}

uint64_t safetensors_header_length(const char (&prefix)[8], uint64_t file_size, const std::string& path) {
  if (file_size < 8) throw damaged(path, str("truncated: ", file_size, " bytes, the header length alone takes 8"));
  uint64_t n = 0;
  std::memcpy(&n, prefix, 8);  // little-endian host
  if (n > file_size - 8)
    throw damaged(path, str("its header claims ", n, " bytes but the file has only ", file_size - 8,
                            " after the length (truncated or not safetensors)"));
  if (n > kMaxHeaderBytes) throw damaged(path, str("a header of ", n, " bytes is not plausible"));
  return n;
}

std::vector<SafetensorsEntry> safetensors_parse_header_text(std::string_view text, uint64_t file_size,
                                                            const std::string& path) {
  const uint64_t data_start = 8 + text.size();
  if (data_start > file_size) throw damaged(path, "the header runs past the end of the file");
  const nlohmann::json header = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) throw damaged(path, "the header is not a JSON object");
  std::vector<SafetensorsEntry> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry e = entry_fields(name, info, path);
    check_entry(e, data_start, file_size - data_start, path);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<SafetensorsEntry> safetensors_parse_header(const std::string& file, const std::string& path) {
  char prefix[8] = {};
  std::memcpy(prefix, file.data(), std::min<size_t>(8, file.size()));
  const uint64_t n = safetensors_header_length(prefix, file.size(), path);
  return safetensors_parse_header_text(std::string_view(file).substr(8, n), file.size(), path);
}

}  // namespace cadre
