// Model registry: arch name -> config parser, builder, adapter.
#include "models/registry.h"

#include "core/error.h"
#include "models/llama/hf_adapter.h"
#include "models/llama/llama_model.h"
#include "models/resnet/resnet_model.h"

namespace cadre {

std::vector<std::string> model_arches() { return {"llama", "resnet"}; }

namespace {

void check_arch(const std::string& arch) {
  for (const auto& a : model_arches())
    if (a == arch) return;
  std::string known;
  for (const auto& a : model_arches()) known += (known.empty() ? "" : ", ") + a;
  throw ConfigError(str("model.arch: unknown architecture '", arch, "' (known: ", known, ")"));
}

}  // namespace

void model_config_resolve(Config& config) {
  check_arch(config.model.arch);
  if (config.model.arch == "llama") config.model.keys = llama_config_keys(llama_config(config.model));
  else config.model.keys = resnet_config_keys(resnet_config(config.model));
}

std::unique_ptr<Model> model_build(const Config& config, bool deferred) {
  check_arch(config.model.arch);
  if (config.model.arch == "llama") return std::make_unique<LlamaModel>(llama_config(config.model), deferred);
  return std::make_unique<ResnetModel>(resnet_config(config.model));
}

std::unique_ptr<Model> model_build_causal_lm(Config& config, const std::string& source, bool deferred) {
  model_config_resolve(config);
  std::unique_ptr<Model> model = model_build(config, deferred);
  CADRE_CONFIG_CHECK(model->causal_lm() != nullptr, source, " holds a ", config.model.arch,
                     " model; generate and serve run Llama models");
  return model;
}

std::unique_ptr<StateDictAdapter> model_state_dict_adapter(const Config& config) {
  check_arch(config.model.arch);
  if (config.model.arch == "llama") return std::make_unique<LlamaHfAdapter>(llama_config(config.model));
  return nullptr;  // ResNet's own names are torchvision's: --format pt writes them as they are
}

HfImportTarget model_hf_import_target(const std::string& config_json, const std::string& source) {
  HfImportTarget target;
  // Llama is the one Hugging Face architecture Cadre imports (llama_section_from_hf names
  // the model_type it found otherwise).
  target.config.model = llama_section_from_hf(config_json, source);
  model_config_resolve(target.config);
  target.adapter = model_state_dict_adapter(target.config);
  // The shapes come from the model itself, built without storage.
  std::unique_ptr<Model> model = model_build(target.config, /*deferred=*/true);
  for (const auto& p : model->module().named_parameters()) target.parameters.push_back({p.key(), p.value().sizes().vec()});
  return target;
}

}  // namespace cadre
