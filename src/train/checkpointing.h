// What a training checkpoint holds and how the trainer's state maps onto it:
//   model.<param>, optim.exp_avg.<param>, optim.exp_avg_sq.<param>  float32, global shapes
//   buffer.<name>             buffers (BatchNorm statistics) and frozen parameters, from rank 0
//   rng.cpu.rank<r>                                                  uint8, CPU generator state
//   state: data_position (global samples consumed), optimizer_steps
// Each rank stages the slices its shard holds (a shard replicated on several ranks is written
// by one of them), and loads the slices its shard needs under the current layout, whatever
// the layout that wrote them.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/snapshot.h"
#include "optim/adamw.h"
#include "shard/fully_shard.h"

namespace cadre {

// Copies this rank's part of the model, optimizer and RNG state into `snapshot`.
void stage_train_state(Snapshot& snapshot, FSDPModule& model, AdamW& optimizer, int rank);

// Checks that the checkpoint was written for this model (every parameter present with the
// same shape, nothing extra): ConfigError naming the first difference otherwise.
void check_checkpoint_fits(const CheckpointReader& reader, FSDPModule& model);

// Reads this rank's part into the model's shard, the optimizer and the RNG; the model's
// compute copies are refreshed at the next gather. CheckpointError when the checkpoint is
// damaged (then the state is partly overwritten: load another checkpoint or stop).
void load_train_state(const CheckpointReader& reader, FSDPModule& model, AdamW& optimizer, int rank);

}  // namespace cadre
