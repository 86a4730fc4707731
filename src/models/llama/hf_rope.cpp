// RoPE settings from and to transformers' config.json (see hf_rope.h for the spellings).
#include "models/llama/hf_rope.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "core/error.h"
#include "core/log.h"

namespace cadre {
namespace {

using nlohmann::json;

// transformers' rope_type -> Cadre's model.rope_scaling; the parameters each one needs.
struct ScalingKind {
  const char* hf_type;
  const char* cadre_name;
  std::vector<std::pair<const char*, const char*>> params;  // (HF field, Cadre key)
};

const std::vector<ScalingKind>& scaling_kinds() {
  static const std::vector<ScalingKind> kinds = {
      {"default", "none", {}},
      {"linear", "linear", {{"factor", "rope_factor"}}},
      {"llama3", "llama3", {{"factor", "rope_factor"}, {"low_freq_factor", "rope_low_freq_factor"},
                            {"high_freq_factor", "rope_high_freq_factor"},
                            {"original_max_position_embeddings", "rope_original_max_seq_len"}}},
  };
  return kinds;
}

// The object at `field` when present and not null.
std::optional<json> object_at(const json& j, const char* field, const std::string& source) {
  if (!j.contains(field) || j[field].is_null()) return std::nullopt;
  CADRE_CONFIG_CHECK(j[field].is_object(), source, ": ", field, " = ", j[field].dump(), " is not an object");
  return j[field];
}

std::optional<double> number_at(const json& j, const char* field, const std::string& where) {
  if (!j.contains(field) || j[field].is_null()) return std::nullopt;
  CADRE_CONFIG_CHECK(j[field].is_number(), where, field, " = ", j[field].dump(), " is not a number");
  return j[field].get<double>();
}

// The scaling an object describes ("rope_type", or "type" as older configs spell it); its keys
// must be ones transformers' Llama reads for that type, never ignored.
const ScalingKind& scaling_kind_of(const json& rope, const std::string& where) {
  const json type = rope.contains("rope_type") ? rope["rope_type"] : rope.value("type", json("default"));
  CADRE_CONFIG_CHECK(!rope.contains("rope_type") || !rope.contains("type") || rope["type"] == type, where,
                     "rope_type = ", type.dump(), " and type = ", rope["type"].dump(), " disagree");
  for (const auto& kind : scaling_kinds()) {
    if (type != kind.hf_type) continue;
    for (const auto& [field, value] : rope.items()) {
      bool known = field == "rope_type" || field == "type" || field == "rope_theta";
      for (const auto& [hf, cadre_key] : kind.params) known = known || field == hf;
      CADRE_CONFIG_CHECK(known, where, field, " = ", value.dump(), " is not supported with rope_type ", type.dump());
    }
    return kind;
  }
  throw ConfigError(str(where, "rope_type = ", type.dump(),
                        " is not supported (Cadre's Llama has \"default\", \"linear\" and \"llama3\"; \"dynamic\" "
                        "would rescale RoPE as the sequence grows, changing the rotation of keys already cached)"));
}

// The rope object of one spelling: transformers 5's rope_parameters (where rope_theta lives), or
// rope_scaling before it (rope_theta top-level), and the prefix naming it in messages.
struct RopeObject {
  json object;
  std::string where;
  bool holds_theta;
};

std::optional<RopeObject> rope_object(const json& j, const std::string& source) {
  const auto params = object_at(j, "rope_parameters", source);
  const auto scaling = object_at(j, "rope_scaling", source);
  if (params && scaling) {
    for (const auto& [field, value] : scaling->items())
      CADRE_CONFIG_CHECK(!params->contains(field) || (*params)[field] == value, source, ": rope_scaling.", field,
                         " = ", value.dump(), " and rope_parameters.", field, " = ", (*params)[field].dump(),
                         " disagree");
  }
  if (params) return RopeObject{*params, source + ": rope_parameters.", true};
  if (scaling) return RopeObject{*scaling, source + ": rope_scaling.", false};
  return std::nullopt;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> rope_keys_from_hf(const json& j, const std::string& source) {
  const std::optional<double> top = number_at(j, "rope_theta", source + ": ");
  std::optional<double> theta = top;
  std::vector<std::pair<std::string, std::string>> keys;
  const ScalingKind* kind = &scaling_kinds().front();
  if (const auto rope = rope_object(j, source)) {
    const auto& [object, where, holds_theta] = *rope;
    kind = &scaling_kind_of(object, where);
    if (const auto nested = number_at(object, "rope_theta", where)) {
      CADRE_CONFIG_CHECK(!top || *top == *nested, source, ": rope_theta = ", *top, " and ", where,
                         "rope_theta = ", *nested, " disagree");
      theta = nested;
    }
    CADRE_CONFIG_CHECK(theta || !holds_theta, where, "rope_theta is missing: ", object.dump());
    for (const auto& [hf, cadre_key] : kind->params) {
      const auto value = number_at(object, hf, where);
      CADRE_CONFIG_CHECK(value, where, hf, " is missing (rope_type \"", kind->hf_type, "\" needs it)");
      keys.emplace_back(cadre_key, object[hf].dump());
    }
  }
  if (!theta) {
    // transformers' own default; a scaled RoPE was trained with a theta of its own.
    CADRE_CONFIG_CHECK(kind == &scaling_kinds().front(), source, ": rope_theta is missing; rope_type \"",
                       kind->hf_type, "\" needs the base it was trained with");
    log::warn(str(source, ": no rope_theta or rope_parameters; transformers' default rope_theta 10000 applies"));
    theta = 10000.0;
  }
  keys.insert(keys.begin(), {{"rope_theta", json(*theta).dump()}, {"rope_scaling", kind->cadre_name}});
  return keys;
}

void rope_to_hf(const LlamaConfig& m, json& out) {
  out["rope_theta"] = m.rope_theta;
  for (const auto& kind : scaling_kinds()) {
    if (m.rope_scaling != kind.cadre_name || kind.params.empty()) continue;
    json scaling = {{"rope_type", kind.hf_type}, {"factor", m.rope_factor}};
    if (m.rope_scaling == "llama3") {
      scaling["low_freq_factor"] = m.rope_low_freq_factor;
      scaling["high_freq_factor"] = m.rope_high_freq_factor;
      scaling["original_max_position_embeddings"] = m.rope_original_max_seq_len;
    }
    out["rope_scaling"] = scaling;
  }
}

}  // namespace cadre
