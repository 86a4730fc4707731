// lora.* in a run (lora_run.h).
#include "train/lora_run.h"

#include "core/error.h"
#include "core/log.h"

namespace cadre {

std::vector<std::string> lora_add_adapters(const Config& c, Model& model, bool lead) {
  if (c.lora.rank == 0) return {};
  std::vector<std::string> layers = lora_apply(model.module(), c.lora, model.lora_names());
  int64_t adapters = 0, base = 0;
  for (const auto& p : model.module().named_parameters()) (lora_is_adapter(p.key()) ? adapters : base) += p.value().numel();
  if (lead)
    log::info(str("lora: rank ", c.lora.rank, ", alpha ", c.lora.alpha, ", dropout ", c.lora.dropout, " on ",
                  layers.size(), " layers (", layers.front(), ", ...): ", adapters, " adapter parameters train (",
                  100.0 * double(adapters) / double(adapters + base), "%), the base's ", base, " are frozen"));
  return layers;
}

}  // namespace cadre
