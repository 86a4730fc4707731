// LoRA exports (lora_export.h).
#include "ckpt/lora_export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "ckpt/checkpoint_error.h"
#include "ckpt/model_origin.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/lora_naming.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj".
std::string module_of(const std::string& hf_weight) {
  CADRE_CHECK(ends_with(hf_weight, ".weight"), "LoRA export: '", hf_weight, "' is not a layer's weight");
  return hf_weight.substr(0, hf_weight.size() - 7);
}

std::string last_part(const std::string& module) { return module.substr(module.rfind('.') + 1); }

// PEFT's target_modules for the adapted modules: the short names ("q_proj") when every module of
// the base with such a name has an adapter, else a regular expression PEFT full-matches against
// module names, listing exactly the adapted ones.
nlohmann::json target_modules(const std::set<std::string>& adapted, const std::set<std::string>& all_modules) {
  std::set<std::string> shorts;
  for (const auto& m : adapted) shorts.insert(last_part(m));
  bool every = true;
  for (const auto& m : all_modules) every = every && (!shorts.count(last_part(m)) || adapted.count(m));
  if (every) return nlohmann::json(std::vector<std::string>(shorts.begin(), shorts.end()));
  std::string pattern;
  for (const auto& m : adapted)
    pattern += (pattern.empty() ? "" : "|") + std::regex_replace(m, std::regex(R"(\.)"), R"(\.)");
  return "(" + pattern + ")";
}

}  // namespace

std::string lora_external_name(const StateDictAdapter& adapter, const std::string& factor) {
  const std::string module = module_of(adapter.external_name(lora_layer_of(factor) + ".weight"));
  return module + (ends_with(factor, ".lora_a") ? ".lora_A.weight" : ".lora_B.weight");
}

LoraCheckpoint lora_checkpoint(const CheckpointReader& reader, const Config& config) {
  LoraCheckpoint out;
  out.config = config.lora;
  const auto& tensors = reader.manifest().tensors;
  // A checkpoint that leaves its base out has no weights to check the factors against: those
  // are checked as the base is read (export --merge).
  const bool with_base = !manifest_leaves_out_base(reader.manifest());
  for (const auto& [name, record] : tensors) {
    if (name.rfind("model.", 0) != 0 || !ends_with(name, ".lora_a")) continue;
    LoraLayerTensors t;
    t.layer = lora_layer_of(name.substr(6));
    t.weight = "model." + t.layer + ".weight";
    t.a = name;
    t.b = "model." + t.layer + ".lora_b";
    const bool has_weight = !with_base || tensors.count(t.weight);
    if (!has_weight || !tensors.count(t.b))
      throw CheckpointError(str(reader.dir(), ": adapter ", name, " has no ", tensors.count(t.b) ? t.weight : t.b));
    const auto &a = record.shape, &b = tensors.at(t.b).shape;
    std::vector<int64_t> w;
    if (with_base) w = tensors.at(t.weight).shape;
    else if (a.size() == 2 && b.size() == 2) w = {b[0], a[1]};
    if (w.size() != 2 || a.size() != 2 || b.size() != 2 || a[1] != w[1] || b[0] != w[0] || a[0] != b[1] ||
        a[0] != config.lora.rank)
      throw CheckpointError(str(reader.dir(), ": adapter of ", t.layer, " does not fit its layer (weight ",
                                tensors.at(t.weight).shape.size(), "-d, lora_a [", a[0], ", ", a[1], "], lora_b [", b[0],
                                ", ", b[1], "], lora.rank ", config.lora.rank, ")"));
    out.layers.push_back(std::move(t));
  }
  if (!out.layers.empty()) out.scale = config.lora.alpha / double(config.lora.rank);
  return out;
}

std::string peft_export(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
                        const LoraCheckpoint& lora, const std::string& out, at::ScalarType dtype) {
  CADRE_CONFIG_CHECK(!lora.empty(), "--format peft: ", reader.dir(),
                     " holds no LoRA adapters (a run without lora.rank); export it with --format hf");
  std::map<std::string, at::Tensor> tensors;
  std::set<std::string> adapted, all_modules;
  for (const auto& t : lora.layers) {
    adapted.insert(module_of(adapter.external_name(t.layer + ".weight")));
    for (const std::string& factor : {t.a, t.b})
      tensors["base_model.model." + lora_external_name(adapter, factor.substr(6))] = reader.read_tensor(factor).to(dtype);
  }
  for (const auto& [name, record] : reader.manifest().tensors)
    if (name.rfind("model.", 0) == 0 && !lora_is_adapter(name) && record.shape.size() == 2) {
      const std::string external = adapter.external_name(name.substr(6));
      if (ends_with(external, ".weight")) all_modules.insert(module_of(external));
    }
  const ModelOrigin origin = model_origin_find(reader.dir(), config.train.init_from);
  const nlohmann::json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", origin.dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(origin.dir)},
      {"r", lora.config.rank},
      {"lora_alpha", lora.config.alpha},
      {"lora_dropout", lora.config.dropout},
      {"target_modules", target_modules(adapted, all_modules)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
  };
  fs::create_directories(out);
  safetensors_write(out + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  file_write_atomic(out + "/adapter_config.json", cfg.dump(2) + "\n");
  int64_t parameters = 0;
  for (const auto& [name, t] : tensors) parameters += t.numel();
  return str("wrote a PEFT LoRA adapter from ", reader.dir(), " to ", out, ": ", lora.layers.size(), " layers, rank ",
             lora.config.rank, ", alpha ", lora.config.alpha, ", ", parameters, " parameters in ",
             dtype == at::kFloat ? "float32" : dtype == at::kBFloat16 ? "bfloat16" : "float16",
             " (adapter_config.json, adapter_model.safetensors)",
             origin.dir.empty() ? "" : "; base " + origin.dir);
}

}  // namespace cadre
