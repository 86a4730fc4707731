// LoRA over a module tree (the config's lora.* section): adapters added to the LoraLinear layers
// (models/lora_linear.h) that lora.targets names, initialised as PEFT initialises them, and
// every other parameter frozen. Model-agnostic: a model says only what its layers are called
// (LoraNames); a user's module gets the same through lora_apply on its LoraLinear layers.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/lora_naming.h"
#include "core/param_source.h"

namespace cadre {

// What a model tells LoRA about its layer names.
struct LoraNames {
  // PEFT's target_modules names and the model's own: {"q_proj", "wq"}, ...
  std::vector<std::pair<std::string, std::string>> aliases;
  std::vector<std::string> defaults;        // the targets when lora.targets is ""
  std::vector<std::string> not_all_linear;  // layers `all-linear` leaves out (the output head)
};

// Adds an adapter (lora.rank, alpha, dropout) to each LoraLinear under `root` that lora.targets
// names (core/config.h has the forms), before the model is sharded or split. Returns the adapted
// layers' names. ConfigError when an entry of the targets matches no LoraLinear, naming it and
// the layers there are.
std::vector<std::string> lora_apply(torch::nn::Module& root, const LoraConfig& config, const LoraNames& names);

// Turns requires_grad off for every parameter but the adapters'. Returns the elements frozen.
int64_t lora_freeze_base(torch::nn::Module& root);

// The initial values of a model with adapters: each A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's
// kaiming_uniform_(a=sqrt(5)) bound) from the counter-based generator in a stream keyed by
// (seed, the parameter's name), so the same at any layout; each B zero, so the adapted model
// starts as its base; everything else read from `base` (the model's own initialisation, a
// Hugging Face folder, a checkpoint). `root`'s shapes are read now: call before it is split.
std::shared_ptr<const ParamSource> lora_init_source(std::shared_ptr<const ParamSource> base,
                                                    torch::nn::Module& root, uint64_t seed);

// The same values written into the adapters of a model that has storage (built whole).
void lora_init_adapters(torch::nn::Module& root, uint64_t seed);

}  // namespace cadre
