// Sharded data parallelism for any libtorch module, in the spirit of PyTorch's FSDP2:
// `fully_shard(submodule, options)` on each submodule that should be a unit, then on the root.
// A unit's parameters (those not in a unit of its own submodules) live in one flat buffer;
// each rank keeps a contiguous float32 shard of it. Units are driven through cadre::call
// (shard/module_hooks.h), which runs them between their hooks:
//
//   for (auto& block : net->blocks) cadre::fully_shard(*block, options);
//   cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
//   cadre::AdamW optimizer(fsdp.parameters(), fsdp.decay_mask(), {...});
//   at::Tensor loss = loss_of(cadre::call(net, x));   // the net's forward calls
//   loss.backward();                                   // cadre::call(block, ...) per block
//   optimizer.step(lr);
//
// Strategies keep FSDP's names and meaning:
//   FULL_SHARD     gather a unit before its forward, free it after; gather again for its
//                  backward; reduce-scatter its gradients as soon as they are complete.
//   SHARD_GRAD_OP  gathered units stay from forward to backward; gradients and optimizer
//                  state are sharded.
//   HYBRID_SHARD   FULL_SHARD inside a shard group, replicated across groups with a gradient
//                  all-reduce between replicas.
//   NO_SHARD       DDP: a full replica; gradients are all-reduced in buckets of about
//                  `bucket_bytes` (parameters in reverse registration order, as DDP) as soon
//                  as a bucket's gradients are complete, overlapping the rest of the backward.
//   ZERO1          ZeRO stage 1 (DeepSpeed): parameters and gradients stay whole on every rank
//                  in the compute dtype; only the float32 master and the optimizer state are
//                  sharded. A unit's gradients are reduce-scattered as soon as they are
//                  complete, each rank updates its shard, and the updated shards are
//                  all-gathered before the unit's next forward (prefetched like FULL_SHARD's).
//                  In bf16 that is 2 + 2 + 12/N bytes per parameter. Gradients are kept (and
//                  accumulated over micro-batches, under no_sync) in the compute dtype; the
//                  first training forward after a reducing backward starts them from zero.
// Float32 master shards are what the optimizer updates; compute runs in param_dtype; gradients
// are reduced in reduce_dtype and accumulated in float32 (ZERO1: in param_dtype; sharded on the
// CPU they wait for their reduce-scatter in param_dtype, which widens them to float32 as it
// reduces, and micro-batches under no_sync add up in float32). A model built deferred (its
// parameters without storage, shard/deferred_param.h) is materialised here: each rank allocates
// and fills only its own shard from FullyShardOptions::param_source. Buffers (BatchNorm statistics) are
// not sharded: in a training forward they are broadcast from rank 0, as DDP does. Parameters
// that do not require grad are left as they are (full on every rank, not updated).
//
// The end of the backward (waiting for reductions, folding them into the shards) runs as an
// autograd callback, so `loss.backward()` is all a caller writes. The implementation is split
// by phase; shard/fsdp_tree.h lists the files (the schedule of communication is in
// shard/fsdp_schedule.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/param_source.h"
#include "core/strategy.h"
#include "shard/shard_plan.h"
#include "shard/flat_param.h"
#include "shard/placement.h"

namespace cadre {

struct MixedPrecision {
  at::ScalarType param_dtype = at::kFloat;   // dtype of the gathered compute parameters
  at::ScalarType reduce_dtype = at::kFloat;  // dtype gradients are reduced in
};

// The ranks a strategy runs over (a 1-D or 2-D mesh). Null: that dimension has one rank.
struct ShardGroups {
  comm::Communicator* shard = nullptr;    // a unit's parameters are sharded over these ranks
  comm::Communicator* replica = nullptr;  // ranks holding the same shard; gradients averaged
};

struct FullyShardOptions {
  Strategy strategy = Strategy::FullShard;
  ShardGroups groups;
  MixedPrecision mixed_precision;
  // Start the next unit's gather while this one computes (forward: the next unit in the last
  // forward's order; backward: the one before).
  bool prefetch = true;
  // Free a unit's gathered parameters after its forward. Default: the strategy's (true for
  // FULL_SHARD and HYBRID_SHARD, false for SHARD_GRAD_OP).
  std::optional<bool> reshard_after_forward;
  // NO_SHARD: gradient all-reduce bucket size (DDP's bucket_cap_mb); the first bucket is
  // capped at 1 MiB so the first reduction starts early.
  int64_t bucket_bytes = int64_t{25} << 20;
  // Broadcast buffers from rank 0 before each training forward (DDP's broadcast_buffers).
  bool broadcast_buffers = true;
  // Parameters that tensor parallelism already split (a 2-D mesh: these groups are the data
  // parallel dimension, the layout's group the tensor-parallel one). FSDP shards the local
  // parts like any parameter; the global gradient norm adds split parameters' squares over
  // the tensor-parallel group and counts replicated ones once; checkpoints place each local
  // part in its global tensor. Null: no tensor parallelism.
  std::shared_ptr<const TensorParallelLayout> tensor_parallel;
  // The ranks holding the model's other parts (pipeline stages, one per stage, each with this
  // tree's counterpart): the global gradient norm adds their squares. Null: this tree is the
  // whole model.
  comm::Communicator* stage_group = nullptr;
  // Parameters this tree holds as a copy of another stage's (a tied embedding the last stage's
  // head reads; the pipeline keeps the two equal): the global gradient norm and checkpoints take
  // them from that stage only, so they are counted and written once.
  std::set<std::string> mirrored;
  // A backward may run through some of the units only (a pipeline stage holding several chunks
  // under the interleaved schedule: each micro-batch's backward runs through one chunk). A unit
  // none of whose gradients arrived sat that backward out, instead of being an error; what units
  // accumulated under no_sync and then sat out the backward that reduces is reduced at its end.
  // Off: every parameter that requires grad must take part in each backward.
  bool partial_backward = false;
  // Where parameters built without storage (shard/deferred_param.h) get their values: each rank
  // reads only its shard (of its tensor-parallel part), allocated on `device`. Both unused when
  // the parameters were initialised before fully_shard.
  std::shared_ptr<const ParamSource> param_source;
  c10::Device device = c10::Device(c10::kCPU);
  // Keep frozen parameters in the compute dtype (mixed_precision.param_dtype) instead of a
  // float32 master: half the bytes in bf16, and a gather without a cast. Their values are
  // rounded once, as every forward would round them; a frozen piece (frozen_parameters()) is
  // then a bf16 tensor. For a LoRA base; train.freeze keeps float32, whose checkpoints hold it.
  bool frozen_in_compute_dtype = false;
};

// Bytes this rank holds for model state, and the most gathered-unit bytes alive at once.
struct ShardMemory {
  int64_t params = 0;        // float32 masters (+ compute copies kept resident, e.g. NO_SHARD bf16)
  int64_t grads = 0;         // float32 reduced gradients this rank keeps
  int64_t frozen = 0;        // frozen parameters' float32 masters (+ compute copies kept resident)
  int64_t optimizer = 0;     // optimizer state (filled in by the caller)
  int64_t peak_working = 0;  // peak bytes of gathered parameters + unsharded gradient buffers
  int64_t peak_whole_grads = 0;  // peak bytes of unsharded gradient buffers alone
  int64_t padded_numel = 0;  // parameters including padding
  int shard_size = 1;        // ranks a unit is sharded over
  int64_t units = 0;         // FSDP units holding parameters (the root included)
  int64_t flat_params = 0;   // flat buffers: one per unit, or NO_SHARD's gradient buckets
};

// Where one optimizer piece sits: elements [start, start + numel) of parameter `name`
// (flattened, shape `shape` on this rank: its tensor-parallel part when the parameter is
// split, see FullyShardOptions::tensor_parallel), inside flat parameter `unit`'s shard.
struct ShardPiece {
  size_t unit = 0;
  std::string name;
  std::vector<int64_t> shape;
  int64_t start = 0;
};

namespace detail {
class FsdpTree;
}

// Handle of a sharded module and the units under it. Its methods act on the whole tree (use
// the root's handle). The tree is set up at its first forward or first use of the handle;
// keep the handle alive as long as the module is used.
class FSDPModule {
 public:
  FSDPModule() = default;
  explicit FSDPModule(std::shared_ptr<detail::FsdpTree> tree) : tree_(std::move(tree)) {}

  // What the optimizer updates: per parameter, the piece of it inside this rank's shard (a
  // view of the float32 master, with .grad a view of the reduced gradient after backward).
  const std::vector<at::Tensor>& parameters();
  // Weight decay applies to matrices and kernels (dim >= 2), not to norms and biases.
  const std::vector<bool>& decay_mask();
  const std::vector<ShardPiece>& piece_layout();

  // While the guard lives, backward passes only accumulate gradients (no communication); the
  // first backward after it reduces everything accumulated (DDP's no_sync).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(detail::FsdpTree* tree);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    detail::FsdpTree* tree_;
  };
  NoSyncGuard no_sync();

  void zero_grad();
  // Global L2 norm of the gradient across shards (collective), then scales by
  // min(1, max_norm / (norm + 1e-6)) when max_norm > 0. Returns the norm.
  double clip_grad_norm(double max_norm);
  // After changing the masters outside the optimizer step (loading a checkpoint): compute
  // copies are refreshed at the next gather. The end of each reducing backward does this too.
  void mark_updated();
  // After the optimizer step: issues the all-gathers the next forward starts with (the root's
  // unit and the first unit of the last forward), so they run behind whatever the caller does
  // before that forward (logging, staging a checkpoint, the next batch); FSDP2's explicit
  // `unshard(async_op=True)` of those units. Masters changed in place after it without
  // mark_updated (an optimizer step after all) are refused at the next forward. Does nothing
  // under NO_SHARD or with FullyShardOptions::prefetch off.
  void prefetch_next_forward();

  // Ranks holding the same shard (replicas under NO_SHARD and HYBRID_SHARD), and this rank's
  // index among them: checkpoints write each shard once, spread over the replicas.
  int replica_count();
  int replica_index();
  // This rank's index in the group its units are sharded over (0 without one).
  int shard_index();
  // Buffers by name (full on every rank).
  std::vector<std::pair<std::string, at::Tensor>> unsharded_state();
  // Frozen parameters (requires_grad off), sharded like the trainable ones: the pieces of them
  // in this rank's shard (views of their float32 masters; no gradient, no optimizer state),
  // where each piece sits (ShardPiece::unit indexes frozen_flat_params()), their flat parameters.
  const std::vector<at::Tensor>& frozen_parameters();
  const std::vector<ShardPiece>& frozen_piece_layout();
  const std::vector<std::unique_ptr<FlatParam>>& frozen_flat_params();

  ShardMemory memory();
  // What this rank's units hold once set up, computed from shapes without allocating (a
  // deferred model's plan before its shards exist).
  ShardPlan plan();
  // The tensor-parallel layout the units were made with (null without tensor parallelism).
  const TensorParallelLayout* tensor_parallel();
  // FullyShardOptions::mirrored.
  const std::set<std::string>& mirrored();
  const std::vector<std::unique_ptr<FlatParam>>& flat_params();

  // Diagnostic (collective): gathers one flat parameter at a time and checks every rank holds
  // the same values. Never holds more than one unit in full.
  bool replicas_identical();

  detail::FsdpTree& tree();

 private:
  std::shared_ptr<detail::FsdpTree> tree_;
};

// Makes `module` an FSDP unit. Units must be created inner first, the root last (the root's
// call takes in the units already created under it). Every rank calls it the same way, with
// parameters equal on every rank.
FSDPModule fully_shard(torch::nn::Module& module, const FullyShardOptions& options);
// One unit over several sibling modules (e.g. consecutive transformer blocks): gathered when
// the first is called, resharded after the last.
FSDPModule fully_shard(const std::vector<torch::nn::Module*>& modules, const FullyShardOptions& options);

}  // namespace cadre
