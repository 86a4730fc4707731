// What the trainer needs from a model, and nothing about which model it is: build and
// initialise it, parallelize it (FSDP units, activation checkpointing), a loss on a batch,
// whether a dataset suits it, and how its parameters map to an external format. Each model
// lives in models/<name>/ and is built by models/registry.h from the config's `model:` section.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "data/manifest.h"
#include "shard/fully_shard.h"

namespace cadre {

// One micro-batch: token sequences and their shifted targets ([B, T] int64 each), or images
// [B, C, H, W] float32 and their labels [B] int64.
struct Batch {
  at::Tensor input, target;
};

struct LossOutput {
  at::Tensor loss;       // mean over the batch, float32 scalar
  int64_t correct = -1;  // classifiers: correct predictions in the batch; -1 otherwise
};

class Model {
 public:
  virtual ~Model() = default;

  virtual torch::nn::Module& module() = 0;
  // Deterministic initialisation from a seed (the same on every rank).
  virtual void init_weights(uint64_t seed) = 0;
  // Makes the model's FSDP units (and activation checkpointing when parallel asks for it)
  // and returns the root's handle. Called once, after init_weights and before training.
  virtual FSDPModule parallelize(const FullyShardOptions& options, const ParallelConfig& parallel) = 0;
  // Forward (through cadre::call, so units gather and free) and the loss.
  virtual LossOutput loss(const Batch& batch) = 0;

  // ConfigError when the dataset does not fit (vocabulary, sequence length, image shape).
  virtual void check_data(const DatasetManifest& data) const = 0;
  // "llama 35.7M parameters, 8 layers, dim 512": for the log.
  virtual std::string describe() const = 0;
  virtual int64_t param_count() const = 0;
  // Forward + backward FLOPs per sample; 0 when not modelled.
  virtual double flops_per_sample(int64_t sample_len) const { return 0; }
  // What one sample counts as in throughput figures: "tokens" (seq_len per sample) or "images".
  virtual const char* throughput_unit() const = 0;
};

}  // namespace cadre
