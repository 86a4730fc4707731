// The all-gather of one flat parameter and freeing it again: gather_start issues it (the
// master shard sent in the compute dtype), gather_wait waits for it, reshard frees the full
// buffer. Which unit is gathered when, and prefetching, is fsdp_schedule.cpp's decision.
// A gather issued early (prefetch_next_forward) can see the masters change before it is waited
// for. After mark_updated (a checkpoint loaded) the wait gathers again: every rank marks at the
// same point, so their collectives stay in step. A change nobody announced (an optimizer step
// after the prefetch) is refused, naming the unit: the master's version counter, bumped by every
// in-place change (the optimizer's pieces are views of the master), tells. One rank gathering
// again on its own could not repair it: a rank whose shard of the unit is all padding sees no
// change, and the ranks' collectives would part.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

// Nothing to do when a gather is in flight or the full buffer is current (not stale).
void FsdpTree::gather_start(FlatParam& f, FlatState& st) {
  if (st.gather_pending || (f.full_allocated() && !st.stale)) return;
  st.stale = false;
  f.full_allocate();
  if (f.master_is_full()) return;
  c10::NoGradGuard no_grad;
  if (!options.groups.shard) {
    f.full.copy_(f.master);
    return;
  }
  st.gather_send = f.master.to(options.mixed_precision.param_dtype);
  st.sent_version = f.master._version();
  st.gather_work = options.groups.shard->all_gather_async(f.full, st.gather_send);
  st.gather_pending = true;
}

void FsdpTree::gather_wait(FlatParam& f, FlatState& st) {
  gather_start(f, st);
  if (st.gather_pending) {
    finish_gather(f, st);
    CADRE_CHECK(st.stale || f.master._version() == st.sent_version, "FSDP unit ", f.unit,
                ": its parameters changed in place while their all-gather was in flight (prefetch_next_forward "
                "before the optimizer step?); prefetch after the step, or call mark_updated after changing them");
    gather_start(f, st);  // again when marked updated while it was in flight
    if (st.gather_pending) finish_gather(f, st);
  }
  note_working_set();
}

void FsdpTree::finish_gather(FlatParam& f, FlatState& st) {
  try {
    st.gather_work.wait();
  } catch (const std::exception& e) {
    throw Error(str("FSDP unit ", f.unit, ": gathering its parameters failed: ", e.what()));
  }
  st.gather_pending = false;
  st.gather_send = at::Tensor();
}

// Frees the full buffer's storage (the views stay; autograd's saved tensors share the storage,
// so regathering into it before the unit's backward restores them).
void FsdpTree::reshard(FlatParam& f, FlatState& st) {
  if (f.master_is_full() || !f.full_allocated() || keeps_full()) return;
  if (st.gather_pending) finish_gather(f, st);  // it writes into the buffer
  f.full_free();
}

// A unit's flat parameters: its trainable one, then its frozen one (the same order on every rank).
void FsdpTree::unit_gather_start(const Unit& u) {
  if (u.flat >= 0) gather_start(static_cast<size_t>(u.flat));
  if (u.frozen >= 0) gather_start(*frozen_flats[u.frozen], *frozen_state_[u.frozen]);
}

void FsdpTree::unit_gather_wait(const Unit& u) {
  if (u.flat >= 0) gather_wait(static_cast<size_t>(u.flat));
  if (u.frozen >= 0) gather_wait(*frozen_flats[u.frozen], *frozen_state_[u.frozen]);
}

void FsdpTree::unit_reshard(const Unit& u) {
  if (u.flat >= 0) reshard(static_cast<size_t>(u.flat));
  if (u.frozen >= 0) reshard(*frozen_flats[u.frozen], *frozen_state_[u.frozen]);
}

void FsdpTree::reshard_everything() {
  for (size_t k = 0; k < flats.size(); ++k) reshard(k);
  for (size_t k = 0; k < frozen_flats.size(); ++k) reshard(*frozen_flats[k], *frozen_state_[k]);
}

}  // namespace cadre::detail
