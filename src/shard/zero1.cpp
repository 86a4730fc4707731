// ZeRO-1 (DeepSpeed's stage 1): parameters and gradients stay whole in the compute dtype; a
// unit's gradient is reduce-scattered into this rank's own block of the whole gradient, in
// place, and that block is the shard the optimizer reads. The other blocks keep this rank's
// unreduced values, so the next training forward starts the gradient from zero. The gather
// of the updated shards is the sharded strategies' (fsdp_gather.cpp).
#include <ATen/ATen.h>

#include "shard/fsdp_tree.h"

namespace cadre::detail {

bool FsdpTree::start_reduce_zero1(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  // Marks the gradient for clear_reduced_zero1_grads at the next training forward.
  st.reduced = true;
  if (!options.groups.shard) return false;  // one rank: the gradient is final as it is
  st.reduce_in = f.grad_full.to(options.mixed_precision.reduce_dtype);  // the buffer itself when the dtypes agree
  // The ring's last fold reads and writes the own block element by element, so the output
  // may alias the input's block.
  st.reduce_out = st.reduce_in.is_same(f.grad_full) ? f.grad_shard : at::empty({f.shard_numel}, st.reduce_in.options());
  st.reduce_work = options.groups.shard->reduce_scatter_async(st.reduce_out, st.reduce_in, comm::ReduceOp::Avg);
  return true;
}

// A reduction in another dtype lands in the shard's block; a whole one-rank gradient
// converted for nothing is simply dropped.
void FsdpTree::fold_zero1(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (options.groups.shard && !st.reduce_out.is_same(f.grad_shard)) f.grad_shard.copy_(st.reduce_out);
}

// A reduced gradient was the last step's (its own block reduced in place, the rest this rank's
// unreduced values): a training forward after it starts from zero, whether or not the caller
// zeroed the optimizer's view. Accumulation spans micro-batches under no_sync(), which never
// reduce.
void FsdpTree::clear_reduced_zero1_grads() {
  for (size_t k = 0; k < flats.size(); ++k)
    if (state_[k]->reduced) {
      flats[k]->grad_full.zero_();
      state_[k]->reduced = false;
    }
}

}  // namespace cadre::detail
