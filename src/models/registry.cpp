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

std::unique_ptr<Model> model_build(const Config& config) {
  check_arch(config.model.arch);
  if (config.model.arch == "llama") return std::make_unique<LlamaModel>(llama_config(config.model));
  return std::make_unique<ResnetModel>(resnet_config(config.model));
}

std::unique_ptr<StateDictAdapter> model_state_dict_adapter(const Config& config) {
  check_arch(config.model.arch);
  if (config.model.arch == "llama") return std::make_unique<LlamaHfAdapter>(llama_config(config.model));
  return nullptr;  // ResNet's own names are torchvision's: --format pt writes them as they are
}

}  // namespace cadre
