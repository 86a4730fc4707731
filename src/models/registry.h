// The models Cadre knows, by `model.arch`: each parses its own `model:` keys, builds itself,
// and may bring a state-dict adapter for export. The only place that names every model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "models/model.h"

namespace cadre {

// "llama", "resnet".
std::vector<std::string> model_arches();

// Checks config.model against its arch (unknown keys, wrong types, invalid values: ConfigError
// naming the key and where it came from) and replaces its keys with the complete resolved set,
// so the run's config.yaml lists every key. Idempotent.
void model_config_resolve(Config& config);

// The model config.model describes, uninitialised (call init_weights).
std::unique_ptr<Model> model_build(const Config& config);

// Its Hugging Face adapter, or null when it has none.
std::unique_ptr<StateDictAdapter> model_state_dict_adapter(const Config& config);

}  // namespace cadre
