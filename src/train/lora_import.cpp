// lora.init_from (lora_import.h).
#include "train/lora_import.h"

#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/hf_folder.h"
#include "core/error.h"
#include "core/lora_naming.h"
#include "models/registry.h"

namespace cadre {
namespace {

constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";
constexpr const char* kPrefix = "base_model.model.";

std::shared_ptr<HfFolder> open_adapter(const std::string& dir) {
  try {
    return std::make_shared<HfFolder>(dir, kAdapterConfig, kAdapterWeights);
  } catch (const ConfigError& e) {
    throw ConfigError(str("lora.init_from: ", e.what(), " (a PEFT LoRA adapter folder)"));
  }
}

// PEFT's tensor name -> the model's factor name ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
// -> "layers.0.attention.wq.lora_a").
std::map<std::string, std::string> factor_names(const HfFolder& folder, const StateDictAdapter& adapter) {
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : folder.tensors()) {
    const bool a = lora_name_ends_with(name, ".lora_A.weight"), b = lora_name_ends_with(name, ".lora_B.weight");
    CADRE_CONFIG_CHECK(name.rfind(kPrefix, 0) == 0 && (a || b), "lora.init_from: '", folder.dir(), "/", kAdapterWeights,
                       "' holds '", name, "', which is not a LoRA factor (", kPrefix, "<module>.lora_A.weight)");
    const std::string module = name.substr(std::string(kPrefix).size(), name.size() - std::string(kPrefix).size() - 14);
    std::string own;
    try {
      own = adapter.internal_name(module + ".weight");
    } catch (const Error& e) {
      throw ConfigError(str("lora.init_from: '", folder.dir(), "' adapts '", module, "', a layer the model has no name "
                            "for: ", e.what()));
    }
    CADRE_CONFIG_CHECK(lora_name_ends_with(own, ".weight"), "lora.init_from: '", module, "' is not a linear layer");
    out[name] = own.substr(0, own.size() - 7) + (a ? ".lora_a" : ".lora_b");
  }
  CADRE_CONFIG_CHECK(!out.empty(), "lora.init_from: '", folder.dir(), "/", kAdapterWeights, "' holds no tensors");
  return out;
}

class PeftAdapterSource : public ParamSource {
 public:
  PeftAdapterSource(std::shared_ptr<const ParamSource> base, std::shared_ptr<HfFolder> folder,
                    std::map<std::string, const HfTensor*> factors)
      : base_(std::move(base)), folder_(std::move(folder)), factors_(std::move(factors)) {}

  void read(const std::string& name, int64_t start, int64_t count, float* out) const override {
    const auto it = factors_.find(name);
    if (it == factors_.end()) return base_->read(name, start, count, out);
    folder_->read_float32_range(*it->second, start, count, out);
  }
  std::string describe() const override {
    return str(base_->describe(), "; LoRA adapters from PEFT folder ", folder_->dir());
  }

 private:
  std::shared_ptr<const ParamSource> base_;
  std::shared_ptr<HfFolder> folder_;
  std::map<std::string, const HfTensor*> factors_;  // the model's factor name -> the folder's tensor
};

}  // namespace

void lora_init_from_config(Config& c) {
  if (c.lora.init_from.empty()) return;
  const auto folder = open_adapter(c.lora.init_from);
  const std::string where = str("lora.init_from: '", c.lora.init_from, "/", kAdapterConfig, "'");
  const nlohmann::json j = nlohmann::json::parse(folder->config_json(), nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(j.is_object(), where, " is not a JSON object");
  CADRE_CONFIG_CHECK(j.value("peft_type", "") == "LORA", where, ": peft_type is ", j.value("peft_type", nlohmann::json()).dump(),
                     ", not \"LORA\"");
  CADRE_CONFIG_CHECK(j.contains("r") && j["r"].is_number_integer() && j["r"].get<int64_t>() > 0, where,
                     ": r must be a positive integer");
  CADRE_CONFIG_CHECK(j.contains("lora_alpha") && j["lora_alpha"].is_number() && j["lora_alpha"].get<double>() > 0,
                     where, ": lora_alpha must be a positive number");
  // Variants whose forward is not y = xW^T + alpha/r (dropout(x) A^T) B^T: refused, never ignored.
  auto absent_or = [&](const char* key, const nlohmann::json& plain) {
    CADRE_CONFIG_CHECK(!j.contains(key) || j[key].is_null() || j[key] == plain, where, ": ", key, " = ", j[key].dump(),
                       " is not supported (Cadre trains plain LoRA: ", key, " = ", plain.dump(), ")");
  };
  absent_or("use_rslora", false);
  absent_or("use_dora", false);
  absent_or("fan_in_fan_out", false);
  absent_or("bias", "none");
  absent_or("modules_to_save", nlohmann::json::array());
  const int64_t r = j["r"].get<int64_t>();
  CADRE_CONFIG_CHECK(c.lora.rank == 0 || c.lora.rank == r, "lora.rank ", c.lora.rank, " is not the rank of lora.init_from '",
                     c.lora.init_from, "' (r = ", r, "); leave lora.rank out or set it to ", r);
  c.lora.rank = r;
  c.lora.alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) c.lora.dropout = j["lora_dropout"].get<double>();
  const auto adapter = model_state_dict_adapter(c);
  CADRE_CONFIG_CHECK(adapter, "lora.init_from: model.arch ", c.model.arch, " has no Hugging Face names");
  std::string targets;  // exactly the folder's layers
  for (const auto& [peft, own] : factor_names(*folder, *adapter))
    if (lora_name_ends_with(own, ".lora_a")) targets += (targets.empty() ? "" : ",") + lora_layer_of(own);
  c.lora.targets = targets;
}

std::shared_ptr<const ParamSource> lora_init_from_source(std::shared_ptr<const ParamSource> base, const Config& c,
                                                         Model& model) {
  auto folder = open_adapter(c.lora.init_from);
  std::map<std::string, std::vector<int64_t>> shapes;  // the model's, before tensor parallelism splits them
  for (const auto& p : model.module().named_parameters())
    if (lora_is_adapter(p.key())) shapes[p.key()] = p.value().sizes().vec();
  std::map<std::string, const HfTensor*> factors;
  for (const auto& [peft, own] : factor_names(*folder, *model_state_dict_adapter(c))) {
    const HfTensor& t = folder->tensors().at(peft);
    const auto it = shapes.find(own);
    CADRE_CONFIG_CHECK(it != shapes.end(), "lora.init_from: '", peft, "' has no adapter in the model (", own, ")");
    CADRE_CONFIG_CHECK(t.shape == it->second, "lora.init_from: '", peft, "' is [", t.shape.size() > 0 ? t.shape[0] : 0,
                       ", ", t.shape.size() > 1 ? t.shape[1] : 0, "] in '", folder->dir(), "', the model's ", own, " is [",
                       it->second[0], ", ", it->second[1], "] (another base?)");
    factors[own] = &t;
  }
  CADRE_CONFIG_CHECK(factors.size() == shapes.size(), "lora.init_from: '", folder->dir(), "' has ", factors.size(),
                     " adapter factors, the model ", shapes.size());
  return std::make_shared<PeftAdapterSource>(std::move(base), std::move(folder), std::move(factors));
}

}  // namespace cadre
