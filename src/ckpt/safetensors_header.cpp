// safetensors header parsing with bounds and overflow checks (see safetensors_header.h).
#include "ckpt/safetensors_header.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/json_number.h"

namespace cadre {

int64_t safetensors_element_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "I64") return 8;
  return 0;
}

std::vector<SafetensorsEntry> safetensors_parse_header(const std::string& file, const std::string& path) {
  auto fail = [&](const std::string& why) { return SafetensorsError(str("safetensors '", path, "': ", why)); };
  if (file.size() < 8) throw fail(str("truncated: ", file.size(), " bytes, the header length alone needs 8"));
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);  // little-endian host
  const uint64_t size = file.size();
  if (n > size - 8) throw fail(str("header of ", n, " bytes runs past the end of the file (", size, " bytes)"));
  const uint64_t data = 8 + n;
  nlohmann::json header = nlohmann::json::parse(file.begin() + 8, file.begin() + static_cast<std::ptrdiff_t>(data),
                                                nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) throw fail("the header is not a JSON object");
  std::vector<SafetensorsEntry> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry e;
    e.name = name;
    try {
      e.dtype = info.at("dtype").get<std::string>();
      e.shape = json_int_list(info.at("shape"), "shape");
      const auto& range = info.at("data_offsets");
      if (!range.is_array() || range.size() != 2) throw fail(str("tensor '", name, "': data_offsets must be [begin, end]"));
      e.begin = json_uint(range[0], "data_offsets");
      e.end = json_uint(range[1], "data_offsets");
    } catch (const SafetensorsError&) {
      throw;
    } catch (const nlohmann::json::exception& ex) {
      throw fail(str("tensor '", name, "': malformed entry: ", ex.what()));
    } catch (const Error& ex) {
      throw fail(str("tensor '", name, "': malformed entry: ", ex.what()));
    }
    const int64_t elem = safetensors_element_size(e.dtype);
    if (elem == 0) throw fail(str("tensor '", name, "': unsupported dtype ", e.dtype));
    const auto numel = checked_numel(e.shape);
    const auto bytes = numel ? checked_mul(*numel, elem) : std::nullopt;
    if (!bytes) throw fail(str("tensor '", name, "': its shape has a negative dimension or overflows"));
    const auto begin = checked_add(data, e.begin), end = checked_add(data, e.end);
    if (e.begin > e.end || !begin || !end || *end > size)
      throw fail(str("tensor '", name, "' lies outside the file (bytes ", e.begin, "..", e.end, " of the data section)"));
    if (e.end - e.begin != static_cast<uint64_t>(*bytes))
      throw fail(str("tensor '", name, "': ", e.end - e.begin, " bytes do not match its shape (", *bytes, " bytes)"));
    e.begin = *begin;
    e.end = *end;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace cadre
