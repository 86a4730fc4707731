// Whether a checkpoint holds the tensors a model expects: the checks shared by resume,
// init_from's load into a model's shards and init_from's reads as a deferred model's shards
// are made. Each failure is a ConfigError "checkpoint '<dir>' does not fit this model: ...".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_reader.h"

namespace cadre {

// "checkpoint '<dir>' does not fit this model: ", the start of every message below.
std::string checkpoint_misfit(const CheckpointReader& reader);

// Tensor `name` is stored, float32, of `shape`.
void require_float32_tensor(const CheckpointReader& reader, const std::string& name, const std::vector<int64_t>& shape);

// Every model.* tensor stored is one the model has (`has`: its name without "model.").
void require_only_model_tensors(const CheckpointReader& reader, const std::function<bool(const std::string&)>& has);

}  // namespace cadre
