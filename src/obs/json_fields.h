// Lenient reads of JSON written by other processes (metrics.jsonl, events.jsonl, summary.json,
// flight-recorder dumps): a field that is missing or of the wrong type gives the fallback
// instead of throwing. Those files come from other versions, killed writers and hand edits,
// and a NaN is written as null, so a report or a live view must draw what it can rather than
// stop at the first odd value. Files Cadre must trust (checkpoints, configs) are read strictly
// elsewhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace cadre::obs {

inline const nlohmann::json* json_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline double json_number(const nlohmann::json& j, const char* key, double fallback = NAN) {
  const nlohmann::json* v = json_field(j, key);
  return v && v->is_number() ? v->get<double>() : fallback;
}

inline int64_t json_integer(const nlohmann::json& j, const char* key, int64_t fallback) {
  const nlohmann::json* v = json_field(j, key);
  return v && v->is_number_integer() ? v->get<int64_t>() : fallback;
}

inline std::string json_text(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  const nlohmann::json* v = json_field(j, key);
  return v && v->is_string() ? v->get<std::string>() : fallback;
}

// Element i of an array of numbers; NaN (a gap in a plot) where it is null or not a number.
inline double json_number_at(const nlohmann::json& array, size_t i, double fallback = NAN) {
  return array.is_array() && i < array.size() && array[i].is_number() ? array[i].get<double>() : fallback;
}

}  // namespace cadre::obs
