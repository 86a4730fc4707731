// train.freeze: the parameters a run does not train, chosen by name.
#pragma once

#include <torch/nn/module.h>

#include <string>

namespace cadre {

// Turns requires_grad off for every parameter of `model` whose name `pattern` matches
// (std::regex_search), before the model is sharded: FSDP then keeps them in frozen flat
// parameters, with no gradient and no optimizer state. Returns how many elements it froze.
// A pattern that matches no parameter, or (when `training`) every one, is a ConfigError.
int64_t freeze_parameters(torch::nn::Module& model, const std::string& pattern, bool training);

}  // namespace cadre
