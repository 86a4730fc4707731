// Fine-tuning from a checkpoint (train.init_from): a fresh run whose weights come from
// another run's or an imported checkpoint, or straight from a Hugging Face folder, at step 0
// with a fresh optimizer and data order. Each rank reads only what its shard needs, so any
// world size and strategy loads any checkpoint and no rank holds the whole model. A folder, or
// a checkpoint for a deferred model, is read while its shards are made (no random
// initialisation first, no conversion pass): exactly the bytes of each rank's elements (of a
// checkpoint, the checksum blocks holding them).
#pragma once

#include <memory>
#include <string>

#include "ckpt/checkpoint_param_source.h"
#include "ckpt/hf_param_source.h"
#include "models/model.h"

#include "comm/comm.h"
#include "core/config.h"
#include "shard/fully_shard.h"

namespace cadre {

// train.init_from names a Hugging Face folder (config.json beside safetensors files).
bool init_from_hf(const Config& config);

// Completes config.model from the checkpoint's config (a folder's config.json): keys the config leaves out are taken
// from it, keys it sets win (a shape they change is caught when loading). Call before
// model_config_resolve; a no-op without train.init_from. ConfigError naming train.init_from
// for a path without a loadable checkpoint or of another architecture.
void init_from_config(Config& config);

// The folder as the source of a deferred model's parameters, checked against `model` (built
// deferred from `config`, not yet parallelized): ConfigError naming the tensor that is missing
// or has another shape.
std::shared_ptr<HfParamSource> init_from_hf_source(const Config& config, Model& model);
// "init_from: rank R read B of T bytes (P%; its shard is 1/N) of <folder> in S s".
void init_from_hf_report(const HfParamSource& source, double seconds, int rank, int64_t dp_share);

// The checkpoint as the source of a deferred model's parameters, checked against `model`
// (built deferred from `config`, not yet parallelized): ConfigError naming the tensor that is
// missing, extra or of another shape, or why the checkpoint cannot be opened.
std::shared_ptr<CheckpointParamSource> init_from_checkpoint_source(const Config& config, Model& model);

// Where a run's weights come from before any adapter: train.init_from's Hugging Face folder or
// checkpoint (`hf` or `checkpoint` is then that source), else the model's counter-based
// initialisation of train.seed. `model` built deferred from `config`, not yet parallelized.
// ConfigError when the model can give no initial weights as a source.
struct BaseParamSource {
  std::shared_ptr<const ParamSource> source;
  std::shared_ptr<HfParamSource> hf;
  std::shared_ptr<CheckpointParamSource> checkpoint;
};
BaseParamSource base_param_source(const Config& config, Model& model);

// Loads the checkpoint's model.* (and buffer.*) into this rank's shard; only its buffers when
// the shards were read from it as they were made (`made_from`). Collective: every rank calls it
// and all fail if one does. Returns the checkpoint's path. A Hugging Face folder was read when
// the shards were made: only its path is returned.
std::string init_from_load(const Config& config, FSDPModule& model, int rank, comm::Communicator* group,
                           const CheckpointParamSource* made_from = nullptr);

}  // namespace cadre
