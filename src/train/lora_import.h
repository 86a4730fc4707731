// lora.init_from: a run's adapters start from a PEFT LoRA adapter folder (adapter_config.json +
// adapter_model.safetensors, as peft's save_pretrained writes one and `cadre ckpt export --format
// peft` does), to continue training one or to fine-tune further from it.
#pragma once

#include <memory>

#include "core/config.h"
#include "core/param_source.h"
#include "models/model.h"

namespace cadre {

// Takes the run's lora.rank, alpha, dropout and targets (exactly the folder's layers, by the
// model's Hugging Face names) from the folder; a no-op without lora.init_from. A lora.rank the
// config sets must be the folder's r. ConfigError naming lora.init_from when the folder is not
// a LoRA adapter Cadre can train (rsLoRA, DoRA, biases, fan_in_fan_out, modules_to_save, layers
// the model has no name for).
void lora_init_from_config(Config& config);

// The folder's adapter values (lora_A -> lora_a, lora_B -> lora_b, checked against the model's
// shapes, read in ranges as shards are made), everything else from `base`.
std::shared_ptr<const ParamSource> lora_init_from_source(std::shared_ptr<const ParamSource> base, const Config& config,
                                                         Model& model);

}  // namespace cadre
