// What the optimizer sees: per parameter, the piece of it inside this rank's shard (a view of
// the float32 master) with a gradient over the same bytes of the reduced gradient shard; and
// what acts on those gradients: zero_grad, relinking dropped gradients, the global norm and
// clipping.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "optim/grad_clip.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

// Weight-decay flags stay per parameter and the padding gets no optimizer state.
void FsdpTree::add_optimizer_pieces(size_t k, const RootParams& root, std::vector<size_t>& piece_rank) {
  FlatParam& f = *flats[k];
  for (size_t i = 0; i < f.params.size(); ++i) {
    const auto [lo, hi] = f.shard_range(i);
    if (lo >= hi) continue;
    at::Tensor piece = f.master.narrow(0, lo - f.shard_offset, hi - lo);
    // Not a view (optimizers detach_() gradients, which views refuse) but the same bytes:
    // grad_shard's storage is never resized (ZeRO-1: nor grad_full's, which holds it), and
    // the deleter keeps it alive.
    at::Tensor grad = at::from_blob(static_cast<char*>(f.grad_shard.data_ptr()) +
                                        (lo - f.shard_offset) * f.grad_shard.element_size(),
                                    {hi - lo}, [keep = f.grad_shard](void*) {}, f.grad_shard.options());
    piece.mutable_grad() = grad;
    pieces.push_back(piece);
    piece_grads_.push_back(grad);
    piece_decay.push_back(f.params[i].dim() >= 2);  // matrices and kernels; not norms, biases
    piece_where_.emplace_back(k, lo - f.shard_offset);
    piece_layout.push_back({k, f.names[i], f.params[i].sizes().vec(), lo - f.offsets[i]});
    piece_rank.push_back(root.position.at(f.params[i].unsafeGetTensorImpl()));
  }
}

// The norm sums pieces in the root's parameter order (as torch's clip_grad_norm_), so the
// figure does not depend on how parameters are grouped into units or buckets.
void FsdpTree::order_pieces_for_norm(const std::vector<size_t>& piece_rank) {
  piece_norm_order_.resize(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) piece_norm_order_[k] = k;
  std::stable_sort(piece_norm_order_.begin(), piece_norm_order_.end(),
                   [&](size_t a, size_t b) { return piece_rank[a] < piece_rank[b]; });
}

void FsdpTree::relink_grads() {
  // Optimizers that "zero" gradients by dropping them (set_to_none, libtorch 2.x's default)
  // cut the views into the flat gradient buffers: the dropped part counts as zero.
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (pieces[k].grad().defined() && pieces[k].grad().is_same(piece_grads_[k])) continue;
    piece_grads_[k].zero_();
    pieces[k].mutable_grad() = piece_grads_[k];
  }
  for (auto& f : flats) f->relink_grads();
}

void FsdpTree::zero_grad() {
  for (size_t k = 0; k < flats.size(); ++k) {
    FlatParam& f = *flats[k];
    f.grad_shard.zero_();
    if (f.grad_allocated()) f.grad_full.zero_();
    f.grad_carry = at::Tensor();
    state_[k]->reduced = false;
  }
}

double FsdpTree::clip_grad_norm(double max_norm) {
  // Under tensor parallelism a split parameter's square adds over the tensor-parallel ranks,
  // a replicated one (the same gradient on each of them) counts once.
  const TensorParallelLayout* tp = options.tensor_parallel.get();
  std::vector<at::Tensor> split, whole;
  for (size_t k : piece_norm_order_) {
    if (options.mirrored.count(piece_layout[k].name)) continue;  // counted on the stage it mirrors
    const Placement* where = tp ? tp->find(piece_layout[k].name) : nullptr;
    (where && !where->replicated ? split : whole).push_back(piece_grads_[k]);
  }
  double sq = grad_sq_norm(whole);
  if (tp && tp->group) {
    at::Tensor t = at::scalar_tensor(grad_sq_norm(split), at::kFloat).reshape({1});
    tp->group->all_reduce(t, comm::ReduceOp::Sum);
    sq += t.item<double>();
  } else {
    sq += grad_sq_norm(split);
  }
  std::vector<at::Tensor> grads;
  for (auto& f : flats) grads.push_back(f->grad_shard);
  // Replicas hold equal shards: the sum runs over one shard group only, then over the stages.
  for (comm::Communicator* group : {options.groups.shard, options.stage_group}) {
    if (!group) continue;
    at::Tensor t = at::scalar_tensor(sq, at::kFloat).reshape({1});
    group->all_reduce(t, comm::ReduceOp::Sum);
    sq = t.item<double>();
  }
  double norm = std::sqrt(sq);
  grad_clip_scale(grads, norm, max_norm);
  return norm;
}

}  // namespace cadre::detail
