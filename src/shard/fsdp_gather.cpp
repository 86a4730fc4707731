// The all-gather of one flat parameter and freeing it again: gather_start issues it (the
// master shard sent in the compute dtype), gather_wait waits for it, reshard frees the full
// buffer. Which unit is gathered when, and prefetching, is fsdp_schedule.cpp's decision.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

// Nothing to do when a gather is in flight or the full buffer is current (not stale).
void FsdpTree::gather_start(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
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
  st.gather_work = options.groups.shard->all_gather_async(f.full, st.gather_send);
  st.gather_pending = true;
}

void FsdpTree::gather_wait(size_t k) {
  gather_start(k);
  FlatState& st = *state_[k];
  if (st.gather_pending) {
    try {
      st.gather_work.wait();
    } catch (const std::exception& e) {
      throw Error(str("FSDP unit ", flats[k]->unit, ": gathering its parameters failed: ", e.what()));
    }
    st.gather_pending = false;
    st.gather_send = at::Tensor();
  }
  note_working_set();
}

// Frees the full buffer's storage (the views stay; autograd's saved tensors share the storage,
// so regathering into it before the unit's backward restores them). A gather still in flight
// writes into the buffer: it is waited for first.
void FsdpTree::reshard(size_t k) {
  FlatParam& f = *flats[k];
  if (f.master_is_full() || !f.full_allocated() || keeps_full()) return;
  if (state_[k]->gather_pending) gather_wait(k);
  f.full_free();
}

}  // namespace cadre::detail
