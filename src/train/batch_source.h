// Batches as tensors from a prepared dataset, whatever its kind: token sequences with their
// shifted targets, or normalised images with their labels. Wraps the data loaders (which know
// no tensors) and keeps their position semantics for resume. Batches land on the training
// device: for a GPU the loaders fill pinned host memory and the copy is asynchronous.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/manifest.h"
#include "data/sample_order.h"
#include "models/model.h"

namespace cadre {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Opens <dir> (its manifest says the kind); `seed` orders the training split; batches are
  // returned on `device`. Encoded images are decoded and augmented as `data` says, by
  // data.workers threads (0: the cores left per local rank beside `train_threads`).
  static std::unique_ptr<BatchSource> open(const std::string& dir, Split split, uint64_t seed,
                                           const DataConfig& data = DataConfig{}, int64_t train_threads = 1,
                                           c10::Device device = c10::Device(c10::kCPU));

  virtual const DatasetManifest& manifest() const = 0;
  // Targets are -100 where nothing is learned (instruction data's prompts and padding): the
  // loss is then a mean over the learned targets of a whole step (train/trainer.cpp).
  virtual bool labelled() const { return false; }
  virtual uint64_t num_samples() const = 0;
  // Units one sample counts for in throughput: tokens per sequence, or 1 image.
  virtual int64_t sample_len() const = 0;
  // Consumes one global micro-batch of `global` samples; returns samples [first, first+count).
  virtual Batch next(uint64_t global, uint64_t first, uint64_t count) = 0;
  // The samples at these indices of the split, in split order (validation).
  virtual Batch at(const std::vector<uint64_t>& indices) const = 0;
  virtual uint64_t position() const = 0;
  virtual void set_position(uint64_t position) = 0;
};

// The targets of `batch` that a loss learns (not -100), counted on the host.
int64_t learned_targets(const Batch& batch);

}  // namespace cadre
