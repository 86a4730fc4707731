// The state behind an FSDPModule (internal to shard/; fully_shard.h is the API): the units of
// one tree, their flat parameters and what the hooks need between calls. FsdpTree's member
// functions are implemented by phase, one file each:
//   fully_shard.cpp          units, taking in the trees of inner units, the FSDPModule handle
//   fsdp_layout.cpp          set-up: names, parameter ownership, one flat parameter per unit
//   ddp_buckets.cpp          NO_SHARD's buckets and the all-reduce of whole gradients
//   fsdp_schedule.cpp        which communication is issued when and waited on where: the
//                            forward and backward hooks, prefetch, the end of the backward
//   fsdp_gather.cpp          the all-gather of one flat parameter, and freeing it again
//   fsdp_reduce.cpp          reduce-scatter of gradients, HYBRID_SHARD's replica all-reduce
//   zero1.cpp                ZeRO-1's reduction into the own block of a whole gradient
//   fsdp_optimizer_view.cpp  the shard pieces the optimizer updates, zero_grad, clipping
//   fsdp_buffers.cpp         broadcast of buffers from rank 0
//   fsdp_frozen.cpp          frozen parameters: their flat parameters and when a backward is
//                            done with them
//   fsdp_diagnostics.cpp     memory accounting, replicas_identical
//   fsdp_plan.cpp            what set-up will allocate, computed without allocating
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "shard/flat_param.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"
#include "shard/shard_plan.h"

namespace cadre::detail {

class FsdpTree;

// Registered on each unit's module as child "_fsdp_state": the module owns the sharding state
// (as FSDP2 keeps it on the module), so a unit lives exactly as long as its module, whether
// or not anyone keeps the handle fully_shard returned.
struct TreeOwner : torch::nn::Module {
  std::shared_ptr<FsdpTree> tree;
};
constexpr const char* kStateChild = "_fsdp_state";

struct Unit {
  std::vector<torch::nn::Module*> modules;
  std::vector<TreeOwner*> owners;  // one per module
  std::vector<HookHandle> hooks;
  FsdpTree* tree = nullptr;
  size_t index = 0;      // position in the tree's units
  std::string name;      // path from the root ("root" for the root), set up at init
  int flat = -1;         // its flat parameter (sharded strategies; -1: none)
  int frozen = -1;       // the flat parameter of its frozen parameters (-1: none)
  bool encloses = false; // other units' modules are inside it (the root of a tree of several)
  int64_t entered = 0;   // module calls in the current forward
  uint64_t seq = 0;      // creation order
  ~Unit();               // leaves the registry of units (fully_shard.cpp)
};

// The modules and all their descendants.
std::unordered_set<const torch::nn::Module*> subtree(const std::vector<torch::nn::Module*>& modules);

// Gather and reduction state of one flat parameter.
struct FlatState {
  comm::Work gather_work;
  bool gather_pending = false;
  at::Tensor gather_send;    // kept alive until the gather finished
  int64_t sent_version = 0;  // the master's version counter when the gather was issued
  bool stale = false;        // the master changed since the full buffer was filled
  // AccumulateGrad nodes of the flat parameter's parameters. The parameters hold them only
  // weakly: without these references the post hooks would silently disappear.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  int64_t pending = 0;  // parameters whose gradient has not arrived in this backward
  bool ready = false;
  bool unreduced = false;  // gradients accumulated under no_sync and not reduced since
  comm::Work reduce_work;
  bool reduce_pending = false;
  at::Tensor reduce_in, reduce_out;
  bool reduced = false;  // ZeRO-1: reduced since the last training forward
  // Frozen flat parameters: the unit they belong to, and how many of its inputs' gradients this
  // backward has still to compute (fsdp_frozen.cpp).
  int unit = -1;
  int64_t inputs_pending = 0;
};

// Units in forward execution order, recorded every forward (as FSDP does), so any forward
// structure prefetches correctly from the second step on.
struct ExecutionOrder {
  std::vector<size_t> current, previous;  // this forward's units so far, the last forward's
  std::vector<int64_t> position;          // unit -> position in `current` (-1: not run yet)

  void start_forward(size_t units);
  void record(size_t unit);  // the unit's first call in this forward
};

// Parameters of the root in its order, each once (a tied parameter keeps its first name).
struct RootParams {
  std::vector<at::Tensor> params;
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  std::unordered_map<const c10::TensorImpl*, size_t> position;  // index in `params`
};
// The root's parameters in its order, each once.
RootParams root_params(torch::nn::Module& root);
// Parameter -> index of the unit that owns it (the innermost unit containing it).
using Ownership = std::unordered_map<const c10::TensorImpl*, size_t>;

class FsdpTree {
 public:
  explicit FsdpTree(FullyShardOptions o) : options(std::move(o)) {}

  FullyShardOptions options;
  std::vector<std::unique_ptr<Unit>> units;  // inner first, the root last
  bool absorbed = false;                     // its units now belong to an enclosing tree

  void ensure_init();
  // The hooks (fsdp_schedule.cpp).
  void pre_forward(Unit& u, const std::vector<at::Tensor>& inputs);
  void post_forward(Unit& u, const std::vector<at::Tensor>& outputs);
  void finish_backward();
  // What the handle offers.
  void zero_grad();
  double clip_grad_norm(double max_norm);
  void mark_updated() {  // every master changed (a checkpoint loaded)
    mark_trainable_updated();
    for (auto& st : frozen_state_) st->stale = true;
  }
  void mark_trainable_updated() {  // an optimizer step comes: frozen masters never change
    for (auto& st : state_) st->stale = true;
  }
  void prefetch_next_forward();
  bool replicas_identical();
  ShardMemory memory() const;
  ShardPlan plan();  // before or after set-up; allocates nothing (fsdp_plan.cpp)

  std::vector<std::unique_ptr<FlatParam>> flats;
  std::vector<at::Tensor> pieces;
  std::vector<bool> piece_decay;
  std::vector<ShardPiece> piece_layout;
  // Frozen parameters (requires_grad off): flat parameters like the trainable ones (one per unit
  // when sharded, one for all under NO_SHARD) and their pieces in this rank's shard, which
  // checkpoints hold but no optimizer sees.
  std::vector<std::unique_ptr<FlatParam>> frozen_flats;
  std::vector<at::Tensor> frozen_pieces;
  std::vector<ShardPiece> frozen_layout;
  std::vector<std::pair<std::string, at::Tensor>> unsharded;  // buffers
  bool reduce_now = true;
  int no_sync_depth = 0;

 private:
  bool sharded() const { return options.strategy != Strategy::NoShard; }
  // Parameters stay whole between steps (DDP, ZeRO-1): nothing is ever freed.
  bool keeps_full() const { return options.strategy == Strategy::NoShard || options.strategy == Strategy::Zero1; }
  bool zero1() const { return options.strategy == Strategy::Zero1; }

  // Set-up (fsdp_layout.cpp, ddp_buckets.cpp, fsdp_optimizer_view.cpp).
  void check_not_absorbed() const;
  void set_root();  // the root module, the options checked, the units named
  void check_options();
  void name_units();
  void build_flats(torch::nn::Module& root);
  Ownership assign_owners(const RootParams& root) const;
  void check_param_dtypes(const RootParams& root_params) const;
  void list_buffers(torch::nn::Module& root);
  // Trainable (or frozen) parameters per flat parameter; `unit_of` gets each one's unit.
  std::vector<std::vector<at::Tensor>> group_by_unit(const RootParams& root, const Ownership& owner, bool trainable,
                                                     std::vector<std::string>& flat_names, std::vector<int>& unit_of) const;
  std::vector<std::vector<at::Tensor>> group_into_buckets(const RootParams& root, const Ownership& owner,
                                                          std::vector<std::string>& flat_names) const;
  void add_flat(const std::string& name, const std::vector<at::Tensor>& params, const RootParams& root);
  std::unique_ptr<FlatParam> make_flat(const std::string& name, const std::vector<at::Tensor>& params,
                                       const RootParams& root, bool trainable) const;
  void build_frozen_flats(const RootParams& root, const Ownership& owner);
  void hook_grad_accumulators(size_t k);
  ParamValues deferred_values(const std::vector<std::string>& names, const std::vector<at::Tensor>& params) const;
  void add_optimizer_pieces(size_t k, const RootParams& root, std::vector<size_t>& piece_rank);
  void order_pieces_for_norm(const std::vector<size_t>& piece_rank);

  // Scheduling (fsdp_schedule.cpp): the decisions of what to issue and wait for.
  void root_pre_forward();
  void clear_reduced_zero1_grads();
  void pre_backward(size_t u);
  void hook_outputs(size_t u, const std::vector<at::Tensor>& outputs);
  void grads_ready(size_t k);
  void launch_ready_buckets();
  void fold_finished_reductions();
  void ensure_final_callback();
  std::vector<bool> close_backward_of_flats();
  void prefetch_unit(size_t unit);
  bool ends_the_forward(const Unit& u) const;

  // Gather (fsdp_gather.cpp): one flat parameter, trainable or frozen, or a unit's flat parameters.
  void gather_start(FlatParam& f, FlatState& st);
  void gather_wait(FlatParam& f, FlatState& st);
  void finish_gather(FlatParam& f, FlatState& st);
  void reshard(FlatParam& f, FlatState& st);
  void gather_start(size_t k) { gather_start(*flats[k], *state_[k]); }
  void gather_wait(size_t k) { gather_wait(*flats[k], *state_[k]); }
  void reshard(size_t k) { reshard(*flats[k], *state_[k]); }
  void unit_gather_start(const Unit& u);
  void unit_gather_wait(const Unit& u);
  void unit_reshard(const Unit& u);
  void reshard_everything();

  // Frozen flat parameters in the backward (fsdp_frozen.cpp).
  void watch_inputs(const Unit& u, const std::vector<at::Tensor>& inputs);
  void frozen_maybe_done(size_t unit);
  void frozen_finish_backward();
  // A unit's gathered parameters are freed in this backward (not kept for the next micro-batch).
  bool frees_in_backward() const { return free_after_forward_ || (free_after_backward_ && reduce_now); }

  // Reduction (fsdp_reduce.cpp, ddp_buckets.cpp, zero1.cpp): issue, then wait and fold in.
  // The start_* functions return whether they issued a collective to wait for.
  void start_reduce(size_t k);
  void reduce_finish(size_t k);
  bool start_reduce_scatter(size_t k);
  void fold_reduce_scatter(size_t k);
  void replica_all_reduce(at::Tensor& shard_grad);
  bool start_whole_all_reduce(size_t k);
  void fold_whole_gradient(size_t k);
  bool start_reduce_zero1(size_t k);
  void fold_zero1(size_t k);

  // Everything else the forward needs (fsdp_buffers.cpp, fsdp_optimizer_view.cpp,
  // fsdp_diagnostics.cpp).
  void broadcast_buffers();
  void relink_grads();
  void note_working_set();

  bool initialized_ = false;
  torch::nn::Module* root_ = nullptr;
  bool free_after_forward_ = false, free_after_backward_ = false;
  std::vector<std::unique_ptr<FlatState>> state_;
  std::vector<std::unique_ptr<FlatState>> frozen_state_;
  std::vector<at::Tensor> piece_grads_;                  // the tensors pieces' .grad must be
  std::vector<size_t> piece_norm_order_;                 // pieces in root parameter order
  std::vector<std::pair<size_t, int64_t>> piece_where_;  // (flat, offset in the shard)
  std::deque<size_t> reducing_;                          // flats whose reduction is in flight
  size_t next_bucket_ = 0;                               // NO_SHARD: buckets launch in order
  bool forward_active_ = false;
  bool callback_queued_ = false;
  ExecutionOrder order_;
  int64_t peak_working_ = 0;
  int64_t peak_whole_grads_ = 0;  // the part of a working set that is whole (unsharded) gradients
  int64_t units_with_params_ = 0;
};

}  // namespace cadre::detail
