// lora.* in a run (models/lora.h does the work): the adapters added to the model as it is built.
// run_setup.cpp freezes the rest once the model is split and its units are planned.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "models/model.h"

namespace cadre {

// Adds the adapters lora.* asks for (none when lora.rank is 0) and, on the lead rank, says how
// many layers and parameters train; returns the adapted layers. ConfigError naming lora.targets
// when they match nothing the model has.
std::vector<std::string> lora_add_adapters(const Config& config, Model& model, bool lead);

}  // namespace cadre
