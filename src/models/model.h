// What the trainer needs from a model, and nothing about which model it is: build and
// initialise it, parallelize it (tensor parallelism where the model has a plan, FSDP units,
// activation checkpointing), a loss on a batch,
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
#include "core/error.h"
#include "data/manifest.h"
#include "shard/device_mesh.h"
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
  // ConfigError naming the key when the parallel section does not suit the model, before any
  // work starts. By default a model has no tensor-parallel plan and refuses tp_size > 1.
  virtual void check_parallel(const ParallelConfig& parallel) const {
    CADRE_CONFIG_CHECK(parallel.tp_size == 1, "parallel.tp_size ", parallel.tp_size, ": ", describe(),
                       " has no tensor-parallel plan (use 1)");
  }
  // Splits the model over the mesh's tp dimension where it has a plan (setting
  // options.tensor_parallel), then makes its FSDP units over options' groups (the dp
  // dimension) and activation checkpointing when parallel asks for it; returns the root's
  // handle. Called once, after init_weights and before training.
  virtual FSDPModule parallelize(const DeviceMesh& mesh, FullyShardOptions options, const ParallelConfig& parallel) = 0;
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
