// In-memory recovery's state (`cadre run --recovery memory`): what a live replica carries across
// a re-formation of its group (model shard, optimizer state, buffers, step, data position, the
// global batch), and the collective that hands it to every rank of the new group, newcomers
// included, over the network: no checkpoint file is read.
//
// Replicated state only (parallel.strategy NO_SHARD): every rank's shard is the whole model, so
// any survivor can seed the new group whatever its size. The survivor that completed the most
// steps is the source: a collective can complete on some ranks and fail on others, so survivors
// may be one step apart, and replicas at the same step are equal bit for bit. Under pipeline
// stages the same holds for each stage's replicas (live_state_adopt_stages).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "optim/optimizer.h"
#include "shard/fully_shard.h"
#include "train/batch_source.h"

namespace cadre {

class DeviceMesh;

struct LiveState {
  int64_t step = 0;             // steps completed
  int64_t data_position = 0;    // global samples consumed
  int64_t optimizer_steps = 0;
  int64_t micro_batches = 0;    // per step, over all data-parallel ranks: the global batch in batch_size units
  int64_t stage = 0;            // the pipeline stage the state is of (0 without stages)
  // metrics.jsonl's record of `step` as this rank measured it ("" before the first step): rank 0
  // writes the file, and may have stopped between a step's last collective and its record.
  std::string last_record;
  // model.<piece>, optim.<state>.<piece>, buffer.<name>: copies, in the order the layout lists them.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// Copies this rank's state (the training thread is between steps or failed inside one; the
// optimizer has not half-stepped: its update follows every collective of the step).
// `data_position` is where the data stood after `step` steps.
LiveState live_state_take(FSDPModule& model, Optimizer& optimizer, int64_t step, int64_t data_position,
                          int64_t micro_batches, std::string last_record);

struct Adopted {
  int64_t step = 0;
  int64_t micro_batches = 0;
  int source = 0;           // the rank whose state everyone now holds (-1: assembled from several)
  int owners = 0;           // sharded state: the ranks of the lost group whose copies were assembled
  int stages = 0;           // pipeline stages (0 without): each stage's state came from its own survivors
  bool transferred = false; // false when every rank already held it (nothing crossed the network)
  int64_t bytes = 0;        // sent by the source
  std::string record;       // the source's record of `step` (LiveState::last_record)
};

// Collective over the new group (null: one rank). Ranks that carry a state (`mine`) restore it;
// then the state of the survivor with the most steps is broadcast unless every rank holds it.
// nullopt when no rank carries one (a fresh start or a restart: resume from disk instead).
std::optional<Adopted> live_state_adopt(const LiveState* mine, FSDPModule& model, Optimizer& optimizer,
                                        BatchSource& data, comm::Communicator* group, int rank);

// The same under pipeline stages (a mesh of pp_size stages outermost, tp_size 1): each stage's
// state comes from a survivor that held that stage. Ranks are numbered afresh when a group
// re-forms, so a survivor may now hold another stage than the one it carries; what it carries
// then serves nobody, and it takes its new stage's state from that stage's replicas. Collective
// over the mesh's world, then over each stage's data-parallel ranks. nullopt when no rank carries
// a state, or (logged on rank 0) when some stage cannot go on from memory: no survivor among its
// new ranks held it, or the stages' survivors are at different steps (a step's last collective
// completed on some ranks only); the caller resumes from disk.
std::optional<Adopted> live_state_adopt_stages(const LiveState* mine, FSDPModule& model, Optimizer& optimizer,
                                               BatchSource& data, const DeviceMesh& mesh);

}  // namespace cadre
