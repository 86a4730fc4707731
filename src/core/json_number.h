// Integers from JSON that comes from files and peers. nlohmann's get<int64_t>() turns a float
// such as 1e30 into an integer with a cast whose result is undefined (UBSan reports it; the
// fuzzers found it in every manifest reader); these accept only JSON integers that fit, and
// throw cadre::Error naming the field otherwise.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace cadre {

inline int64_t json_int(const nlohmann::json& j, const std::string& what) {
  if (j.is_number_unsigned() && j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(j.get<uint64_t>());
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<int64_t>();
  throw Error(str(what, " must be an integer that fits 64 bits, got ", j.dump().substr(0, 60)));
}

inline uint64_t json_uint(const nlohmann::json& j, const std::string& what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  throw Error(str(what, " must be a non-negative integer that fits 64 bits, got ", j.dump().substr(0, 60)));
}

inline std::vector<int64_t> json_int_list(const nlohmann::json& j, const std::string& what) {
  if (!j.is_array()) throw Error(str(what, " must be a list of integers, got ", j.dump().substr(0, 60)));
  std::vector<int64_t> out;
  for (const auto& v : j) out.push_back(json_int(v, what));
  return out;
}

}  // namespace cadre
