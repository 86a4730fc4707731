// The models Cadre knows, by `model.arch`: each parses its own `model:` keys, builds itself,
// may bring a state-dict adapter for export, and a language model its decoder for text
// generation (Model::causal_lm). The only place that names every model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/hf_import.h"
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

// The model config.model describes, uninitialised (call init_weights). `deferred`: its
// parameters without storage where the model can be built so (Model::init_source non-null;
// others are built as usual): parallelize then materialises each rank's shard.
std::unique_ptr<Model> model_build(const Config& config, bool deferred = false);

// The model config.model describes, for text generation: as model_build, after
// model_config_resolve, and ConfigError ("<source> holds a resnet model; ...") when it has
// no CausalLm side. Its weights are not initialised: the caller loads trained ones (deferred:
// it has no storage either, for a decoder that reads its weights itself).
std::unique_ptr<Model> model_build_causal_lm(Config& config, const std::string& source, bool deferred = false);

// Its Hugging Face adapter, or null when it has none.
std::unique_ptr<StateDictAdapter> model_state_dict_adapter(const Config& config);

// What a Hugging Face folder whose config.json reads `config_json` must hold, for the model
// it describes (by model_type); ConfigError naming `source` for one Cadre does not know.
HfImportTarget model_hf_import_target(const std::string& config_json, const std::string& source);

}  // namespace cadre
