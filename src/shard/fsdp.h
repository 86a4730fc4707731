// Sharded data parallel (FSDP) for the Llama module. Each transformer block is a unit (or
// consecutive blocks, by the parameter-count wrap policy) and the embedding, final norm and
// head form the root unit. Strategies keep FSDP's names and meaning:
//   FULL_SHARD     gather a unit before its forward, free it after; gather again for its
//                  backward; reduce-scatter its gradients as soon as they are complete.
//   SHARD_GRAD_OP  gathered units stay from forward to backward; gradients and optimizer
//                  state are sharded.
//   HYBRID_SHARD   FULL_SHARD inside a shard group, replicated across groups with a gradient
//                  all-reduce between replicas.
//   NO_SHARD       DDP: a full replica; each unit's gradients are all-reduced as soon as they
//                  are complete (one bucket per unit), overlapping the rest of the backward.
// Float32 master shards are what the optimizer updates; compute runs in param_dtype; gradients
// are reduced in reduce_dtype and accumulated in float32.
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "models/llama/llama.h"
#include "shard/flat_param.h"

namespace cadre {

enum class Strategy { FullShard, ShardGradOp, HybridShard, NoShard };
Strategy parse_strategy(const std::string& name);  // ConfigError names parallel.strategy

struct ShardOptions {
  Strategy strategy = Strategy::NoShard;
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  bool activation_checkpointing = false;
  bool prefetch = true;
  int64_t wrap_min_params = 0;  // 0: one unit per block; else blocks grouped to >= this many
};

// Bytes this rank holds for model state, and the most gathered-unit bytes alive at once.
struct ShardMemory {
  int64_t params = 0;     // float32 masters (+ compute copies kept resident, e.g. NO_SHARD bf16)
  int64_t grads = 0;      // float32 reduced gradients this rank keeps
  int64_t optimizer = 0;  // AdamW moments (filled in by the caller)
  int64_t peak_working = 0;  // peak bytes of gathered parameters + unsharded gradient buffers
  int64_t padded_numel = 0;  // parameters including padding
  int shard_size = 1;        // ranks a unit is sharded over
  int64_t units = 0;         // FSDP units including the root
};

// Where one optimizer piece sits: elements [start, start + numel) of parameter `name`
// (flattened, global shape `shape`), inside unit `unit`'s shard on this rank.
struct ShardPiece {
  size_t unit = 0;
  std::string name;
  std::vector<int64_t> shape;
  int64_t start = 0;
};

class ShardedModel {
 public:
  // `shard` shards the units (null: not sharded); `replica` all-reduces gradients between
  // replicas (null: none). Parameters must be equal on every rank.
  ShardedModel(Llama& model, ShardOptions options, comm::Communicator* shard, comm::Communicator* replica);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // Forward through the units (collective when sharded: every rank calls it). With autograd
  // on, the backward of the returned logits gathers and reduces units through hooks.
  at::Tensor forward(const at::Tensor& tokens);

  // Tells the hooks whether this micro-batch's backward reduces gradients (the last one of a
  // step) or only accumulates them (no communication).
  void set_reduce_this_backward(bool reduce) { reduce_now_ = reduce; }
  // After backward: wait for the reductions, fold them into the shards, free what the
  // strategy frees. Errors name the unit and parameters whose gradients never arrived.
  void finish_backward();

  void zero_grad();
  // Global L2 norm of the gradient across shards (collective), then scales by
  // min(1, max_norm / (norm + 1e-6)) when max_norm > 0. Returns the norm.
  double clip_grad_norm(double max_norm);

  // What the optimizer updates: per parameter, the piece of it inside this rank's shard
  // (a view of the master shard with .grad a view of the reduced gradient).
  const std::vector<at::Tensor>& optimizer_params() const { return pieces_; }
  const std::vector<bool>& optimizer_decay() const { return piece_decay_; }
  const std::vector<ShardPiece>& piece_layout() const { return piece_layout_; }
  // Ranks holding the same shard (replicas under NO_SHARD and HYBRID_SHARD), and this
  // rank's index among them: checkpoints write each shard once, spread over the replicas.
  int replica_count() const { return replica_ ? replica_->size() : 1; }
  int replica_index() const { return replica_ ? replica_->rank() : 0; }
  // After the optimizer step: compute copies are refreshed at the next gather.
  void mark_updated();

  // Full float32 values by parameter name, gathered from the shards (collective). With
  // `per_piece` given (one tensor per optimizer_params() entry, e.g. AdamW's moments), gathers
  // those instead.
  std::map<std::string, at::Tensor> gather_full(const std::vector<at::Tensor>* per_piece = nullptr);

  ShardMemory memory() const;
  const std::vector<std::unique_ptr<FlatParam>>& units() const { return units_; }

 private:
  struct UnitState;
  void gather_start(size_t u);
  void gather_wait(size_t u);
  void reshard(size_t u);
  void pre_backward(size_t u);
  void grads_ready(size_t u);
  void reduce_finish(size_t u);
  at::Tensor run_block(int64_t index, Block& block, const at::Tensor& x, const Rope& rope, const at::Tensor& mask);
  void note_working_set();

  Llama& model_;
  ShardOptions options_;
  comm::Communicator* shard_;
  comm::Communicator* replica_;
  bool free_after_forward_, free_after_backward_;
  std::vector<std::unique_ptr<FlatParam>> units_;  // block units in order, then root
  std::vector<size_t> block_unit_;                  // unit of each block
  std::vector<int64_t> unit_first_, unit_last_;     // first and last block of each block unit
  std::vector<std::unique_ptr<UnitState>> state_;
  std::vector<at::Tensor> pieces_;
  std::vector<bool> piece_decay_;
  std::vector<std::pair<size_t, int64_t>> piece_where_;  // (unit, offset in the shard)
  std::vector<ShardPiece> piece_layout_;
  std::deque<size_t> reducing_;  // units whose reduction is in flight, oldest first
  bool reduce_now_ = true;
  int64_t peak_working_ = 0;
};

}  // namespace cadre
