// What a training checkpoint holds and how the trainer's state maps onto it:
//   model.<param>, optim.<state>.<param>                            float32, global shapes
//     (<state>: the optimizer's, AdamW exp_avg and exp_avg_sq, SGD momentum_buffer)
//   buffer.<name>             buffers (BatchNorm statistics) and frozen parameters, from rank 0
//   rng.cpu.rank<r>                                                  uint8, CPU generator state
//   state: data_position (global samples consumed), optimizer_steps
// Each rank stages the boxes its shard holds: its FSDP shard of a parameter's local part is a
// range of that part's elements, and the part is a box of the global parameter (the whole of
// it without tensor parallelism), so the range is written as the few boxes it spans. A shard
// replicated on several ranks (data-parallel replicas, tensor-parallel copies of a norm) is
// written by one of them. Loading reads the boxes the current layout needs, whatever the
// layout that wrote them.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/snapshot.h"
#include "optim/optimizer.h"
#include "shard/fully_shard.h"

namespace cadre {

// How stage_train_state takes the state held in CPU memory.
enum class CpuStaging {
  Copy,    // copied into the snapshot: training goes on changing the originals while it is written
  Borrow,  // referenced where it is, no copy: nothing may change it until the snapshot is written
           // (a run's last checkpoint; the copy would add the state's size to the run's peak)
  Queue,   // (tests) through the queued copies a device's tensors take
};

// Whether stage_train_state takes the frozen parameters.
enum class FrozenStaging {
  Include,  // a checkpoint of a run that freezes parameters itself (train.freeze), the in-memory copies
  Leave,    // a LoRA run's checkpoints: the base is read again from where the run read it
};

// Stages this rank's part of the model, optimizer and RNG state into `snapshot`. Tensors on a
// device are copied into page-locked host buffers without waiting for the device; the writer
// waits for those copies (Snapshot::finish) before reading. CPU tensors as `cpu` says.
void stage_train_state(Snapshot& snapshot, FSDPModule& model, Optimizer& optimizer, int rank,
                       CpuStaging cpu = CpuStaging::Copy, FrozenStaging frozen = FrozenStaging::Include);

// The pieces of `layout` (model.piece_layout() or model.frozen_piece_layout()) this rank
// writes: a shard that several replicas hold is written once (units are spread over the
// replicas so they share the writing), a tensor-parallel copy once. Over all ranks, every
// element of every parameter exactly once.
std::vector<size_t> pieces_this_rank_writes(FSDPModule& model, const std::vector<ShardPiece>& layout);

// Where a piece's elements sit in its global tensor: the global shape, and the box of it that
// the piece's (tensor-parallel) part is; the piece is elements [start, start + numel) of that
// box's row-major order.
struct GlobalPlace {
  std::vector<int64_t> shape;
  Box part;
};
GlobalPlace global_place(const ShardPiece& where, const TensorParallelLayout* tp);

// Checks that the checkpoint was written for this model (every parameter present with the
// same shape, nothing extra; with `optimizer`, that optimizer's state too, and no other
// optimizer's; the frozen parameters unless the checkpoint leaves its base out,
// manifest_leaves_out_base): ConfigError naming the first difference otherwise.
// `held_elsewhere`: the model's parameters other pipeline stages hold (a checkpoint of the whole
// model fits each stage).
void check_checkpoint_fits(const CheckpointReader& reader, FSDPModule& model, Optimizer* optimizer,
                           const std::set<std::string>* held_elsewhere = nullptr);

// Reads this rank's part of model.* and the buffers into the model's shard (fine-tuning from
// another run's or an imported checkpoint); the frozen parameters keep their values when the
// checkpoint leaves its base out. CheckpointError when it is damaged.
void load_model_state(const CheckpointReader& reader, FSDPModule& model);
// Reads the checkpoint's buffer.* into the model's unsharded buffers (a model whose shards
// were read as they were made: CheckpointParamSource). ConfigError for another dtype or shape.
void load_buffers(const CheckpointReader& reader, FSDPModule& model);

// Reads this rank's part into the model's shard, the optimizer and the RNG; the model's
// compute copies are refreshed at the next gather. CheckpointError when the checkpoint is
// damaged (then the state is partly overwritten: load another checkpoint or stop).
void load_train_state(const CheckpointReader& reader, FSDPModule& model, Optimizer& optimizer, int rank);

// Loads this rank's part of the model, optimizer and buffers from slices staged under another
// layout and held in memory (in-memory recovery: the packed states of a lost group's ranks),
// one source at a time, so no rank ever holds more than its part and one source.
class StateFiller {
 public:
  StateFiller(FSDPModule& model, Optimizer& optimizer);
  // Copies whatever of this rank's part `pieces` hold (their bytes at `base` + offset); the RNG
  // from the piece named `rng_name` ("rng.cpu.rank<r>") if it is there.
  void apply(const std::vector<SnapshotPiece>& pieces, const char* base, const std::string& rng_name);
  // Error (naming the rank and tensor) unless every element of this rank's part was copied
  // exactly once; then refreshes device copies and the model's compute copies.
  void finish(int rank);

 private:
  struct Target {
    std::string name;
    std::vector<Run> runs;  // where the part's elements sit in the global tensor
    int64_t start = 0;      // the first run's position (the part's elements are start, start + 1, ...)
    at::Tensor into, host;  // the rank's tensor, and where it is filled (itself on the CPU)
    int64_t filled = 0;
  };
  void add_target(std::string name, const std::vector<int64_t>& shape, const Box& part, int64_t start,
                  const at::Tensor& into);
  FSDPModule& model_;
  std::vector<Target> targets_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace cadre
