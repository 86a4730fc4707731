// Gradient reduction of one flat parameter: issuing it (by strategy and mesh) and, once it is
// waited for, folding the result into the rank's float32 gradient shard. Under the sharded
// strategies that is a reduce-scatter (AVG) over the shard group, then for HYBRID_SHARD an
// all-reduce of the shard over the replica group. NO_SHARD's whole-gradient all-reduce is in
// ddp_buckets.cpp, ZeRO-1's in-place reduction in zero1.cpp; when reductions are issued and
// waited for is fsdp_schedule.cpp's decision.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

void FsdpTree::start_reduce(size_t k) {
  c10::NoGradGuard no_grad;
  state_[k]->unreduced = false;
  const bool issued = zero1()                ? start_reduce_zero1(k)
                      : options.groups.shard ? start_reduce_scatter(k)
                                             : start_whole_all_reduce(k);
  if (!issued) return;
  state_[k]->reduce_pending = true;
  reducing_.push_back(k);
}

// Waits for flat k's reduction and folds it into its gradient shard (freeing the unsharded
// gradient where the strategy does).
void FsdpTree::reduce_finish(size_t k) {
  c10::NoGradGuard no_grad;
  FlatState& st = *state_[k];
  if (st.reduce_pending) {
    try {
      st.reduce_work.wait();
    } catch (const std::exception& e) {
      throw Error(str("FSDP unit ", flats[k]->unit, ": reducing its gradients failed: ", e.what()));
    }
    st.reduce_pending = false;
  }
  if (!st.reduce_out.defined()) return;
  if (zero1()) fold_zero1(k);
  else if (options.groups.shard) fold_reduce_scatter(k);
  else fold_whole_gradient(k);
  st.reduce_in = st.reduce_out = at::Tensor();
}

bool FsdpTree::start_reduce_scatter(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  const at::Tensor grads = f.fold_carry_for_reduction();
  const at::ScalarType reduce_dtype = options.mixed_precision.reduce_dtype;
  // bf16 gradients reduced in float32: the reduce-scatter widens them (a float32 output).
  const bool widening = reduce_dtype == at::kFloat && grads.scalar_type() != at::kFloat && grads.is_cpu();
  st.reduce_in = widening ? grads : grads.to(reduce_dtype);  // the buffer itself when the dtypes agree
  st.reduce_out = at::empty({f.shard_numel}, st.reduce_in.options().dtype(reduce_dtype));
  st.reduce_work = options.groups.shard->reduce_scatter_async(st.reduce_out, st.reduce_in, comm::ReduceOp::Avg);
  return true;
}

// The shard's reduced gradient adds into its float32 shard (gradients accumulate there across
// reducing backwards until zero_grad); the unsharded gradient is no longer needed.
void FsdpTree::fold_reduce_scatter(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (options.groups.replica) replica_all_reduce(st.reduce_out);
  f.grad_shard.add_(st.reduce_out.to(at::kFloat));
  f.grad_free();
}

// HYBRID_SHARD: the shard groups reduced within themselves; replicas (ranks holding the same
// shard) average their shards. Blocking, inside the fold: the schedule sees one reduction.
void FsdpTree::replica_all_reduce(at::Tensor& shard_grad) {
  options.groups.replica->all_reduce(shard_grad, comm::ReduceOp::Avg);
}

}  // namespace cadre::detail
