// The schedule of communication: which collective is issued when, and waited on where. Every
// hook lands here and decides; the collectives themselves are in fsdp_gather.cpp,
// fsdp_reduce.cpp, ddp_buckets.cpp and zero1.cpp. In one step:
//   after the optimizer   (prefetch_next_forward, when the caller asks) the root's unit and the
//                         first unit of the last forward gathered, to be waited for below
//   root's forward        ZeRO-1's stale gradients cleared, buffers broadcast (blocking), the
//                         root's unit gathered and kept to the end of the backward, the first
//                         unit of the last forward prefetched
//   a unit's forward      its gather waited for (issued now if no prefetch did); the unit that
//                         followed it in the last forward prefetched
//   after a forward       reshard per strategy (not the unit the last forward ended with: its
//                         backward is next); hooks on the outputs that require grad
//   before its backward   its gather waited for; the unit that ran before it in this forward
//                         prefetched; its gradient buffer allocated
//   gradients complete    the reduction issued (NO_SHARD: buckets in index order); finished ones
//                         folded in and all but the newest waited for, so at most two unsharded
//                         gradients are alive; reshard per strategy
//   a unit's backward done  the gradients of its inputs and its own parameters complete: its
//                         frozen parameters resharded per strategy (fsdp_frozen.cpp)
//   end of the backward   the remaining reductions waited for and folded in (HYBRID_SHARD's
//                         replica all-reduce runs inside the fold), compute copies marked stale
// Collectives must be issued in the same order on every rank: the autograd engine runs nodes in
// a deterministic order on CPU and the recorded forward order is the same everywhere.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>

#include "core/error.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

void ExecutionOrder::start_forward(size_t units) {
  if (!current.empty()) previous = std::move(current);
  current.clear();
  position.assign(units, -1);
}

void ExecutionOrder::record(size_t unit) {
  position[unit] = static_cast<int64_t>(current.size());
  current.push_back(unit);
}

void FsdpTree::prefetch_unit(size_t unit) {
  if (options.prefetch) unit_gather_start(*units[unit]);
}

// The next forward starts with the root's unit and then the first unit of the last forward:
// issued now, after the optimizer step, their gathers run behind whatever the caller does
// before that forward; root_pre_forward and pre_forward then only wait for them.
void FsdpTree::prefetch_next_forward() {
  if (!sharded() || !options.prefetch) return;
  unit_gather_start(*units.back());
  const std::vector<size_t>& last = order_.current.empty() ? order_.previous : order_.current;
  if (!last.empty()) prefetch_unit(last[0]);
}

void FsdpTree::pre_forward(Unit& u, const std::vector<at::Tensor>& inputs) {
  if (&u == units.back().get()) {
    root_pre_forward();
    watch_inputs(u, inputs);
    return;
  }
  CADRE_CHECK(forward_active_, "FSDP unit '", u.name.empty() ? "?" : u.name,
              "' was called outside the forward of its root module; call the root through cadre::call");
  if (u.entered++ == 0) order_.record(u.index);
  watch_inputs(u, inputs);
  if (u.flat < 0 && u.frozen < 0) return;
  unit_gather_wait(u);
  // Forward prefetch: the unit that came next in the last forward.
  const size_t pos = static_cast<size_t>(order_.position[u.index]);
  if (pos + 1 < order_.previous.size()) prefetch_unit(order_.previous[pos + 1]);
}

void FsdpTree::root_pre_forward() {
  ensure_init();
  forward_active_ = true;  // also after a forward that threw: a new root call starts afresh
  for (auto& u : units) u->entered = 0;
  order_.start_forward(units.size());
  const bool grad = at::GradMode::is_enabled();
  if (grad) {
    for (auto& st : frozen_state_) st->inputs_pending = 0;  // a forward whose backward never ran
    clear_reduced_zero1_grads();
    relink_grads();
    if (options.broadcast_buffers && root_->is_training()) broadcast_buffers();
  }
  if (!sharded()) {  // refreshes stale compute copies
    for (size_t k = 0; k < flats.size(); ++k) gather_wait(k);
    for (size_t k = 0; k < frozen_flats.size(); ++k) gather_wait(*frozen_flats[k], *frozen_state_[k]);
    return;
  }
  // The root's parameters are used first and last (an embedding, a head): it stays gathered
  // from the start of the forward to the end of the backward, as in PyTorch FSDP.
  unit_gather_wait(*units.back());
  int root_flat = units.back()->flat;
  if (root_flat >= 0 && grad) flats[root_flat]->grad_allocate_zero();
  if (!order_.previous.empty()) prefetch_unit(order_.previous[0]);
}

void FsdpTree::post_forward(Unit& u, const std::vector<at::Tensor>& outputs) {
  const bool grad = at::GradMode::is_enabled();
  if (&u == units.back().get()) {
    forward_active_ = false;
    if (grad) hook_outputs(u.index, outputs);
    else reshard_everything();  // inference: nothing stays gathered
    return;
  }
  if (grad) hook_outputs(u.index, outputs);
  // A grouped unit is resharded after the last of its modules.
  const bool group_done = u.entered % static_cast<int64_t>(u.modules.size()) == 0;
  if ((u.flat < 0 && u.frozen < 0) || !group_done) return;
  // The unit the last forward ended with has its backward next, right after the loss: freeing
  // it only to gather it again at once would put a gather before the backward with nothing to
  // hide it behind (FSDP2 leaves this to its user: reshard_after_forward=False on the last
  // layer). It is resharded after its backward.
  if (grad && ends_the_forward(u)) return;
  if (free_after_forward_ || !grad) unit_reshard(u);
}

bool FsdpTree::ends_the_forward(const Unit& u) const {
  return !order_.previous.empty() && order_.previous.back() == u.index;
}

// An output's gradient hook fires right before the unit's backward.
void FsdpTree::hook_outputs(size_t u, const std::vector<at::Tensor>& outputs) {
  for (const auto& out : outputs)
    if (out.defined() && out.requires_grad()) out.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
}

// Runs when the gradient of one of the unit's outputs is ready, right before its backward.
void FsdpTree::pre_backward(size_t u) {
  ensure_final_callback();
  unit_gather_wait(*units[u]);
  const int k = units[u]->flat;
  if (k >= 0) flats[k]->grad_allocate_zero();
  // Backward prefetch: the unit that ran before this one in the forward runs next now (after
  // the root's outputs, the last unit of the forward).
  const int64_t pos = u + 1 == units.size() ? static_cast<int64_t>(order_.current.size()) : order_.position[u];
  if (pos > 0) prefetch_unit(order_.current[pos - 1]);
  note_working_set();
}

// The end of the backward runs as an autograd callback, so `loss.backward()` is all a caller
// writes. It is queued from the first hook of a backward, the root's output hook, which fires
// in the outer graph task before any re-entrant (checkpoint) backward starts.
void FsdpTree::ensure_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

// Runs when the last of a flat parameter's gradients was accumulated.
void FsdpTree::grads_ready(size_t k) {
  ensure_final_callback();
  state_[k]->ready = true;
  note_working_set();
  if (!sharded()) {
    launch_ready_buckets();
    return;
  }
  if (reduce_now) {
    fold_finished_reductions();
    start_reduce(k);
  }
  // During accumulation SHARD_GRAD_OP keeps the unit gathered: no communication at all until
  // the last micro-batch. FULL_SHARD frees it (it is gathered again for the next forward).
  if (frees_in_backward()) reshard(k);
  if (state_[k]->unit >= 0) frozen_maybe_done(static_cast<size_t>(state_[k]->unit));
}

// Buckets launch in index order on every rank, whatever order they complete in: a bucket
// that completes early waits for the ones before it.
void FsdpTree::launch_ready_buckets() {
  while (reduce_now && next_bucket_ < flats.size() && state_[next_bucket_]->ready) start_reduce(next_bucket_++);
}

// Bounds the unsharded gradients alive at once: folds in reductions that finished, and waits
// for all but the newest one (one unit's reduction overlaps the next unit's backward).
void FsdpTree::fold_finished_reductions() {
  while (!reducing_.empty() && (reducing_.size() > 1 || state_[reducing_.front()]->reduce_work.done())) {
    reduce_finish(reducing_.front());
    reducing_.pop_front();
  }
}

// Each flat parameter's gradients of this backward all arrived, or (partial_backward) none of
// them did: it sat the backward out; NO_SHARD's buckets, which follow registration order and
// not units, may also have received some. Resets the count for the next backward; returns
// which flat parameters took part.
std::vector<bool> FsdpTree::close_backward_of_flats() {
  std::vector<bool> took_part(flats.size());
  for (size_t k = 0; k < flats.size(); ++k) {
    FlatParam& f = *flats[k];
    FlatState& st = *state_[k];
    const int64_t all = static_cast<int64_t>(f.params.size());
    const bool allowed = options.partial_backward && (st.pending == all || !sharded());
    CADRE_CHECK(st.ready || allowed, "FSDP unit ", f.unit, ": ", st.pending, " of its ", f.params.size(),
                " parameter gradients never arrived in the backward (first parameter ", f.names[0],
                "); every parameter that requires grad must take part in the loss");
    took_part[k] = st.ready || st.pending < all;
    st.ready = false;
    st.pending = all;
  }
  return took_part;
}

void FsdpTree::finish_backward() {
  if (!callback_queued_) return;  // no backward reached this tree since the last finish
  callback_queued_ = false;
  c10::NoGradGuard no_grad;
  const std::vector<bool> took_part = close_backward_of_flats();
  frozen_finish_backward();
  if (!reduce_now) {  // accumulating: the gradients stay unsharded until the last micro-batch
    for (size_t k = 0; k < flats.size(); ++k) {
      if (!took_part[k]) continue;  // nothing new in its buffer
      flats[k]->carry_grads();
      state_[k]->unreduced = true;
    }
    return;
  }
  if (!sharded())
    while (next_bucket_ < flats.size()) start_reduce(next_bucket_++);
  next_bucket_ = 0;
  // Units that accumulated under no_sync and sat this backward out (partial_backward): their
  // reduction was not issued when gradients arrived, as the others' was.
  for (size_t k = 0; k < flats.size(); ++k) {
    if (!state_[k]->unreduced) continue;
    start_reduce(k);
    if (frees_in_backward()) reshard(k);
  }
  for (size_t k : reducing_) reduce_finish(k);
  reducing_.clear();
  // Without a group nothing was in flight; a low-precision reduction still lands in float32.
  for (size_t k = 0; k < flats.size(); ++k) reduce_finish(k);
  mark_trainable_updated();  // an optimizer step comes next: compute copies refresh at the next gather
}

}  // namespace cadre::detail
