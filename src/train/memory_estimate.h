// What one rank of a run will hold, estimated before anything is allocated: from the shard
// plan (shard/shard_plan.h), the strategy, the dtypes, the optimizer and the model's
// activations. `cadre train` prints it on rank 0, `--dry-run` prints it for a world it does
// not start, and a run that cannot fit its limit stops with it (memory_fit.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shard/shard_plan.h"

namespace cadre {

struct EstimateInputs {
  ShardPlan plan;
  int64_t compute_bytes = 4;             // parallel.mixed_precision.param_dtype's element size
  int64_t optimizer_bytes_per_param = 8; // AdamW's two moments
  bool training = true;                  // false: train.steps 0, only what loading holds
  bool accumulate_unsharded = false;     // parallel.accumulate_unsharded with grad_accum_steps > 1
  bool prefetch = true;
  bool cpu = true;                       // the training device is the CPU
  int64_t huge_page_bytes = 0;           // host blocks are made resident in pages of this size (0: 4 KiB)
  int64_t activations = -1;              // Model::activation_bytes (-1: the model does not say)
  // Checkpoints saved before the run's last one (checkpoint.interval below train.steps) stage a
  // copy of this rank's shards and optimizer state in host memory; the last is written from
  // the state itself. Counted where the state is host memory (on a GPU the copy is not).
  bool periodic_checkpoints = false;
  bool async_checkpoints = true;         // the copy is written while the next steps run
  bool checkpoint_frozen = true;         // false: a LoRA run's checkpoints leave the frozen base out
  int64_t frozen_master_bytes = 4;       // a frozen master's bytes per element (a LoRA base: the compute dtype's)
  int64_t replicas = 1;                  // data-parallel ranks holding the same shards share their writing
};

struct MemoryEstimate {
  int64_t params = 0;       // float32 masters this rank keeps, and compute copies kept resident
  int64_t grads = 0;        // reduced gradients this rank keeps
  int64_t optimizer = 0;    // optimizer state
  int64_t gathered = 0;     // units made whole at once: their parameters and gradients
  int64_t activations = 0;  // -1: not estimated
  int64_t frozen = 0;       // frozen parameters' float32 masters and compute copies kept resident
  int64_t unsharded = 0;    // buffers, whole on every rank
  // A periodic checkpoint's staged copy, beyond what it overlaps: asynchronous, the copy sits
  // beside the next steps (all of it); synchronous, it is written and released between steps,
  // so only what it exceeds of the steps' gathered units and activations.
  int64_t checkpoint = 0;
  int64_t total() const;
  std::string to_text() const;  // "parameters 1.20 GiB + gradients ... = 4.10 GiB"
  nlohmann::json to_json() const;
};

MemoryEstimate estimate_memory(const EstimateInputs& in);

// 2 MiB where transparent huge pages are on for the CPU block cache's blocks (the kernel's
// setting "always" or "madvise"), else 0.
int64_t host_huge_page_bytes();

}  // namespace cadre
