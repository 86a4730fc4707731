// PeftAdapterFolder (peft_folder.h).
#include "ckpt/peft_folder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/lora_naming.h"

namespace cadre {
namespace {

constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";
const std::string kPrefix = "base_model.model.";

HfFolder open_folder(const std::string& dir, const std::string& what) {
  try {
    return HfFolder(dir, kAdapterConfig, kAdapterWeights);
  } catch (const ConfigError& e) {
    throw ConfigError(str(what, ": ", e.what(), " (a PEFT LoRA adapter folder)"));
  }
}

}  // namespace

PeftAdapterFolder::PeftAdapterFolder(const std::string& dir, const StateDictAdapter& names, const std::string& what)
    : folder_(open_folder(dir, what)) {
  const std::string where = str(what, ": '", dir, "/", kAdapterConfig, "'");
  const nlohmann::json j = nlohmann::json::parse(folder_.config_json(), nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(j.is_object(), where, " is not a JSON object");
  CADRE_CONFIG_CHECK(j.value("peft_type", "") == "LORA", where, ": peft_type is ",
                     j.value("peft_type", nlohmann::json()).dump(), ", not \"LORA\"");
  CADRE_CONFIG_CHECK(j.contains("r") && j["r"].is_number_integer() && j["r"].get<int64_t>() > 0, where,
                     ": r must be a positive integer");
  CADRE_CONFIG_CHECK(j.contains("lora_alpha") && j["lora_alpha"].is_number() && j["lora_alpha"].get<double>() > 0,
                     where, ": lora_alpha must be a positive number");
  // Variants whose forward is not y = xW^T + alpha/r (dropout(x) A^T) B^T: refused, never ignored.
  auto absent_or = [&](const char* key, const nlohmann::json& plain) {
    CADRE_CONFIG_CHECK(!j.contains(key) || j[key].is_null() || j[key] == plain, where, ": ", key, " = ", j[key].dump(),
                       " is not supported (Cadre applies plain LoRA: ", key, " = ", plain.dump(), ")");
  };
  absent_or("use_rslora", false);
  absent_or("use_dora", false);
  absent_or("fan_in_fan_out", false);
  absent_or("bias", "none");
  absent_or("modules_to_save", nlohmann::json::array());
  rank_ = j["r"].get<int64_t>();
  alpha_ = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) dropout_ = j["lora_dropout"].get<double>();

  for (const auto& [name, t] : folder_.tensors()) {
    const bool a = ends_with(name, ".lora_A.weight"), b = ends_with(name, ".lora_B.weight");
    CADRE_CONFIG_CHECK(name.rfind(kPrefix, 0) == 0 && (a || b), what, ": '", dir, "/", kAdapterWeights, "' holds '",
                       name, "', which is not a LoRA factor (", kPrefix, "<module>.lora_A.weight)");
    const std::string module = name.substr(kPrefix.size(), name.size() - kPrefix.size() - 14);
    std::string own;
    try {
      own = names.internal_name(module + ".weight");
    } catch (const Error& e) {
      throw ConfigError(str(what, ": '", dir, "' adapts '", module, "', a layer the model has no name for: ", e.what()));
    }
    CADRE_CONFIG_CHECK(ends_with(own, ".weight"), what, ": '", module, "' is not a linear layer");
    CADRE_CONFIG_CHECK(t.shape.size() == 2 && t.shape[a ? 0 : 1] == rank_, what, ": '", name, "' in '", dir,
                       "' is not of rank r = ", rank_);
    factors_[own.substr(0, own.size() - 7) + (a ? ".lora_a" : ".lora_b")] = &t;
  }
  CADRE_CONFIG_CHECK(!factors_.empty(), what, ": '", dir, "/", kAdapterWeights, "' holds no tensors");
  for (const auto& [factor, t] : factors_) {
    const std::string other = lora_layer_of(factor) + (ends_with(factor, ".lora_a") ? ".lora_b" : ".lora_a");
    CADRE_CONFIG_CHECK(factors_.count(other), what, ": '", dir, "' has ", factor, " without ", other);
  }
}

std::vector<std::string> PeftAdapterFolder::layers() const {
  std::vector<std::string> out;
  for (const auto& [factor, t] : factors_)
    if (ends_with(factor, ".lora_a")) out.push_back(lora_layer_of(factor));
  return out;
}

void PeftAdapterFolder::read(const std::string& factor, int64_t start, int64_t count, float* out) const {
  const auto it = factors_.find(factor);
  CADRE_CHECK(it != factors_.end(), "PEFT adapter '", dir(), "' has no factor ", factor);
  folder_.read_float32_range(*it->second, start, count, out);
}

}  // namespace cadre
