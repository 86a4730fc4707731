// serve_load_adapters (lora_adapters.h).
#include "serve/lora_adapters.h"

#include <ATen/ATen.h>

#include "ckpt/peft_folder.h"
#include "core/error.h"
#include "core/log.h"

namespace cadre {

std::map<std::string, int64_t> serve_load_adapters(const std::vector<std::string>& specs, const std::string& base_name,
                                                   const StateDictAdapter& names, Decoder& decoder) {
  std::map<std::string, int64_t> out;
  for (const auto& spec : specs) {
    const size_t eq = spec.find('=');
    CADRE_CONFIG_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "--lora '", spec,
                       "': expected name=path (the model id requests send, then a PEFT adapter folder)");
    const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    CADRE_CONFIG_CHECK(name != base_name, "--lora '", spec, "': '", name, "' is the base model's id");
    CADRE_CONFIG_CHECK(!out.count(name), "--lora '", spec, "': adapter '", name, "' is given twice");
    const PeftAdapterFolder folder(path, names, "--lora " + name);
    LoraWeights weights;
    weights.name = name;
    weights.scale = folder.scale();
    for (const auto& [factor, t] : folder.factors()) {
      at::Tensor values = at::empty(t->shape, at::kFloat);
      folder.read(factor, 0, values.numel(), values.data_ptr<float>());
      weights.factors[factor] = values;
    }
    out[name] = decoder.add_adapter(weights);
    log::info(str("serve: LoRA adapter '", name, "' from ", path, " (rank ", folder.rank(), ", alpha ", folder.alpha(),
                  ", ", folder.layers().size(), " layers)"));
  }
  return out;
}

}  // namespace cadre
