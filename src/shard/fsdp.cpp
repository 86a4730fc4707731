// FSDP units over Llama: gather/free around each block, hooks for backward, gradient
// reduction as each unit's gradients complete, prefetch, clipping and full-state gathers.
#include "shard/fsdp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>

#include "core/error.h"
#include "optim/grad_clip.h"
#include "shard/activation_checkpoint.h"
#include "shard/wrap_policy.h"

namespace cadre {

Strategy parse_strategy(const std::string& name) {
  if (name == "FULL_SHARD") return Strategy::FullShard;
  if (name == "SHARD_GRAD_OP") return Strategy::ShardGradOp;
  if (name == "HYBRID_SHARD") return Strategy::HybridShard;
  if (name == "NO_SHARD") return Strategy::NoShard;
  throw ConfigError(str("parallel.strategy: unknown '", name, "' (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD)"));
}

struct ShardedModel::UnitState {
  comm::Work gather_work;
  bool gather_pending = false;
  at::Tensor gather_send;  // kept alive until the gather finished
  bool stale = false;      // the master changed since the full buffer was filled
  // AccumulateGrad nodes of the unit's parameters. The parameters hold them only weakly:
  // without these references the post hooks would silently disappear.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  int64_t pending = 0;  // parameters whose gradient has not arrived in this backward
  bool ready = false;
  comm::Work reduce_work;
  bool reduce_pending = false;
  at::Tensor reduce_in, reduce_out;
};

ShardedModel::ShardedModel(Llama& model, ShardOptions options, comm::Communicator* shard,
                           comm::Communicator* replica)
    : model_(model), options_(options), shard_(shard), replica_(replica) {
  const bool sharded = options.strategy != Strategy::NoShard;
  CADRE_CHECK(sharded || shard_ == nullptr, "NO_SHARD takes no shard group");
  free_after_forward_ = options.strategy == Strategy::FullShard || options.strategy == Strategy::HybridShard;
  free_after_backward_ = sharded;
  const int group = shard_ ? shard_->size() : 1, group_rank = shard_ ? shard_->rank() : 0;

  // Units: blocks as the wrap policy groups them, then the root (embedding, final norm, head).
  auto& blocks = model.layers->blocks;
  std::vector<int64_t> block_params;
  for (auto& b : blocks) {
    int64_t n = 0;
    for (auto& p : b->parameters()) n += p.numel();
    block_params.push_back(n);
  }
  block_unit_.resize(blocks.size());
  for (const auto& unit_blocks : wrap_blocks(block_params, options.wrap_min_params)) {
    std::vector<std::string> names;
    std::vector<at::Tensor> params;
    for (int64_t i : unit_blocks) {
      block_unit_[i] = units_.size();
      for (auto& item : blocks[i]->named_parameters()) {
        names.push_back(str("layers.", i, ".", item.key()));
        params.push_back(item.value());
      }
    }
    const int64_t first = unit_blocks.front(), last = unit_blocks.back();
    unit_first_.push_back(first);
    unit_last_.push_back(last);
    std::string name = first == last ? str("layers.", first) : str("layers.", first, "-", last);
    units_.push_back(std::make_unique<FlatParam>(name, names, params, group, group_rank, options.param_dtype));
  }
  {
    std::vector<std::string> names;
    std::vector<at::Tensor> params;
    for (auto& item : model.named_parameters()) {
      if (item.key().rfind("layers.", 0) == 0) continue;
      names.push_back(item.key());
      params.push_back(item.value());
    }
    units_.push_back(std::make_unique<FlatParam>("root", names, params, group, group_rank, options.param_dtype));
  }

  for (size_t u = 0; u < units_.size(); ++u) {
    auto st = std::make_unique<UnitState>();
    FlatParam& f = *units_[u];
    for (auto& p : f.params) {
      auto acc = torch::autograd::impl::grad_accumulator(p);
      CADRE_CHECK(acc, "FSDP unit ", f.unit, ": no gradient accumulator (parameter does not require grad?)");
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, u](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (--state_[u]->pending == 0) grads_ready(u);
            return outputs;
          }));
      st->accumulators.push_back(std::move(acc));
    }
    st->pending = static_cast<int64_t>(f.params.size());
    state_.push_back(std::move(st));
    // The optimizer's view: the part of each parameter inside this rank's shard.
    for (size_t i = 0; i < f.params.size(); ++i) {
      const int64_t lo = std::max(f.offsets[i], f.shard_offset);
      const int64_t hi = std::min(f.offsets[i] + f.numels[i], f.shard_offset + f.shard_numel);
      if (lo >= hi) continue;
      at::Tensor piece = f.master.narrow(0, lo - f.shard_offset, hi - lo);
      piece.mutable_grad() = f.grad_shard.narrow(0, lo - f.shard_offset, hi - lo);
      pieces_.push_back(piece);
      piece_decay_.push_back(f.params[i].dim() >= 2);  // no decay on norms
      piece_where_.emplace_back(u, lo - f.shard_offset);
      piece_layout_.push_back({u, f.names[i], f.params[i].sizes().vec(), lo - f.offsets[i]});
    }
    // Sharded at rest (with a one-rank group the gradient buffer is the shard's: it stays).
    if (free_after_backward_ && !f.master_is_full()) f.full_free();
    if (free_after_backward_ && !f.grad_shard.is_same(f.grad_full)) f.grad_free();
  }
  model_.set_block_runner([this](int64_t index, Block& block, const at::Tensor& x, const Rope& rope,
                                 const at::Tensor& mask) { return run_block(index, block, x, rope, mask); });
}

ShardedModel::~ShardedModel() { model_.set_block_runner(nullptr); }

void ShardedModel::gather_start(size_t u) {
  FlatParam& f = *units_[u];
  UnitState& st = *state_[u];
  if (st.gather_pending || (f.full_allocated() && !st.stale)) return;
  st.stale = false;
  f.full_allocate();
  if (f.master_is_full()) return;
  at::NoGradGuard no_grad;
  if (!shard_) {
    f.full.copy_(f.master);
    return;
  }
  st.gather_send = f.master.to(options_.param_dtype);
  st.gather_work = shard_->all_gather_async(f.full, st.gather_send);
  st.gather_pending = true;
}

void ShardedModel::gather_wait(size_t u) {
  gather_start(u);
  UnitState& st = *state_[u];
  if (st.gather_pending) {
    try {
      st.gather_work.wait();
    } catch (const std::exception& e) {
      throw Error(str("FSDP unit ", units_[u]->unit, ": gathering its parameters failed: ", e.what()));
    }
    st.gather_pending = false;
    st.gather_send = at::Tensor();
  }
  note_working_set();
}

void ShardedModel::reshard(size_t u) {
  FlatParam& f = *units_[u];
  if (f.master_is_full() || !f.full_allocated()) return;
  if (state_[u]->gather_pending) gather_wait(u);
  f.full_free();
}

at::Tensor ShardedModel::forward(const at::Tensor& tokens) {
  const size_t root = units_.size() - 1;
  // The root's parameters are used first (embedding) and last (head): it stays gathered from
  // the start of the forward to the end of the backward, as in PyTorch FSDP.
  gather_wait(root);
  if (options_.prefetch && root > 0) gather_start(0);
  const bool grad = at::GradMode::is_enabled();
  if (grad) units_[root]->grad_allocate_zero();
  at::Tensor logits = model_.forward(tokens);
  if (!grad && free_after_backward_)
    for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  return logits;
}

at::Tensor ShardedModel::run_block(int64_t index, Block& block, const at::Tensor& x, const Rope& rope,
                                   const at::Tensor& mask) {
  const size_t u = block_unit_[index];
  if (index == unit_first_[u]) {
    gather_wait(u);
    // Forward prefetch: the next unit's gather runs while this one computes.
    if (options_.prefetch && u + 2 < units_.size()) gather_start(u + 1);
  }
  const bool grad = at::GradMode::is_enabled();
  at::Tensor out = grad && options_.activation_checkpointing ? checkpointed_block(block, x, rope, mask)
                                                             : block.forward(x, rope, mask);
  if (index == unit_last_[u]) {
    if (free_after_forward_) reshard(u);
    // The unit's last block is the first of its blocks the backward reaches.
    if (out.requires_grad()) out.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
  }
  return out;
}

// Runs when the gradient of the unit's output is ready, right before the unit's backward.
void ShardedModel::pre_backward(size_t u) {
  gather_wait(u);
  units_[u]->grad_allocate_zero();
  // Backward prefetch: the previous unit's gather overlaps this unit's backward.
  if (options_.prefetch && u > 0) gather_start(u - 1);
  note_working_set();
}

// Runs when the last of the unit's parameter gradients was accumulated.
void ShardedModel::grads_ready(size_t u) {
  FlatParam& f = *units_[u];
  UnitState& st = *state_[u];
  st.ready = true;
  note_working_set();
  if (reduce_now_) {
    at::NoGradGuard no_grad;
    // Bound the unsharded gradients alive at once: fold in reductions that finished, and wait
    // for all but the newest one (one unit's reduction overlaps the next unit's backward).
    while (!reducing_.empty() && (reducing_.size() > 1 || state_[reducing_.front()]->reduce_work.done())) {
      reduce_finish(reducing_.front());
      reducing_.pop_front();
    }
    const bool low = options_.reduce_dtype != at::kFloat;
    st.reduce_in = low ? f.grad_full.to(options_.reduce_dtype) : f.grad_full;
    if (shard_) {
      st.reduce_out = at::empty({f.shard_numel}, st.reduce_in.options());
      st.reduce_work = shard_->reduce_scatter_async(st.reduce_out, st.reduce_in, comm::ReduceOp::Avg);
      st.reduce_pending = true;
    } else if (replica_) {
      st.reduce_out = st.reduce_in;
      st.reduce_work = replica_->all_reduce_async(st.reduce_in, comm::ReduceOp::Avg);
      st.reduce_pending = true;
    }
    if (st.reduce_pending) reducing_.push_back(u);
  }
  // During accumulation SHARD_GRAD_OP keeps the unit gathered: no communication at all until
  // the last micro-batch. FULL_SHARD frees it (it is gathered again for the next forward).
  if (free_after_forward_ || (free_after_backward_ && reduce_now_)) reshard(u);
}

void ShardedModel::finish_backward() {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    FlatParam& f = *units_[u];
    UnitState& st = *state_[u];
    CADRE_CHECK(st.ready, "FSDP unit ", f.unit, ": ", st.pending, " of its ", f.params.size(),
                " parameter gradients never arrived in the backward (first parameter ", f.names[0],
                "); every parameter of a unit must take part in the loss");
    st.ready = false;
    st.pending = static_cast<int64_t>(f.params.size());
  }
  for (size_t u : reducing_) reduce_finish(u);
  reducing_.clear();
}

// Waits for unit u's reduction and folds it into its float32 shard; frees the unsharded gradient.
void ShardedModel::reduce_finish(size_t u) {
  at::NoGradGuard no_grad;
  FlatParam& f = *units_[u];
  UnitState& st = *state_[u];
  if (!st.reduce_pending) return;
  try {
    st.reduce_work.wait();
  } catch (const std::exception& e) {
    throw Error(str("FSDP unit ", f.unit, ": reducing its gradients failed: ", e.what()));
  }
  st.reduce_pending = false;
  if (shard_) {
    if (replica_) replica_->all_reduce(st.reduce_out, comm::ReduceOp::Avg);
    f.grad_shard.add_(st.reduce_out.to(at::kFloat));
    f.grad_free();
  } else if (!st.reduce_out.is_same(f.grad_full)) {
    f.grad_full.copy_(st.reduce_out);
  }
  st.reduce_in = st.reduce_out = at::Tensor();
}

void ShardedModel::zero_grad() {
  for (auto& f : units_) {
    f->grad_shard.zero_();
    if (f->grad_allocated()) f->grad_full.zero_();
  }
}

double ShardedModel::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> grads;
  for (auto& f : units_) grads.push_back(f->grad_shard);
  double sq = grad_sq_norm(grads);  // padding is zero and adds nothing
  if (shard_) {
    // Replicas hold equal shards: the sum runs over one shard group only.
    at::Tensor t = at::scalar_tensor(sq, at::kFloat).reshape({1});
    shard_->all_reduce(t, comm::ReduceOp::Sum);
    sq = t.item<double>();
  }
  double norm = std::sqrt(sq);
  grad_clip_scale(grads, norm, max_norm);
  return norm;
}

void ShardedModel::mark_updated() {
  for (auto& st : state_) st->stale = true;
}

std::map<std::string, at::Tensor> ShardedModel::gather_full(const std::vector<at::Tensor>* per_piece) {
  at::NoGradGuard no_grad;
  CADRE_CHECK(!per_piece || per_piece->size() == pieces_.size(), "gather_full: ", per_piece->size(),
              " tensors for ", pieces_.size(), " shard pieces");
  std::vector<at::Tensor> sources;
  for (auto& f : units_) sources.push_back(per_piece ? at::zeros({f->shard_numel}, at::kFloat) : f->master);
  if (per_piece)
    for (size_t k = 0; k < pieces_.size(); ++k)
      sources[piece_where_[k].first].narrow(0, piece_where_[k].second, (*per_piece)[k].numel()).copy_((*per_piece)[k]);
  std::map<std::string, at::Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u) {
    FlatParam& f = *units_[u];
    at::Tensor full = sources[u];
    if (shard_) {
      full = at::empty({f.padded}, at::kFloat);
      shard_->all_gather(full, sources[u].contiguous());
    }
    for (size_t i = 0; i < f.params.size(); ++i)
      out[f.names[i]] = full.narrow(0, f.offsets[i], f.numels[i]).view(f.params[i].sizes()).clone();
  }
  return out;
}

void ShardedModel::note_working_set() {
  int64_t bytes = 0;
  for (auto& f : units_) {
    if (!f->master_is_full() && f->full_allocated()) bytes += f->full_bytes();
    if (!f->grad_shard.is_same(f->grad_full) && f->grad_allocated()) bytes += f->padded * 4;
  }
  peak_working_ = std::max(peak_working_, bytes);
}

ShardMemory ShardedModel::memory() const {
  ShardMemory m;
  m.shard_size = shard_ ? shard_->size() : 1;
  m.peak_working = peak_working_;
  m.units = static_cast<int64_t>(units_.size());
  for (auto& f : units_) {
    m.padded_numel += f->padded;
    m.params += f->shard_numel * 4;
    // A compute copy kept between steps (NO_SHARD in bf16) is model state too.
    if (!f->master_is_full() && !free_after_backward_) m.params += f->full_bytes();
    m.grads += f->shard_numel * 4;
  }
  return m;
}

}  // namespace cadre
