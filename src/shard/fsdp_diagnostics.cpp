// What a tree reports about itself: the bytes of model state this rank holds and the peak of
// gathered buffers (ShardMemory), and, as a collective check, whether every replica holds the
// same parameters.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "shard/fsdp_tree.h"

namespace cadre::detail {

// Gathered parameters and unsharded gradients alive now; the peak is what memory() reports.
void FsdpTree::note_working_set() {
  int64_t gathered = 0, grads = 0;
  for (auto& f : flats) {
    if (!f->master_is_full() && f->full_allocated()) gathered += f->full_bytes();
    if (!f->grad_shard.is_same(f->grad_full) && f->grad_allocated()) grads += f->grad_bytes();
    if (f->grad_carry.defined()) grads += f->grad_carry.nbytes();
  }
  for (auto& f : frozen_flats)
    if (!f->master_is_full() && f->full_allocated()) gathered += f->full_bytes();
  peak_working_ = std::max(peak_working_, gathered + grads);
  peak_whole_grads_ = std::max(peak_whole_grads_, grads);
}

ShardMemory FsdpTree::memory() const {
  ShardMemory m;
  m.shard_size = options.groups.shard ? options.groups.shard->size() : 1;
  m.peak_working = peak_working_;
  m.peak_whole_grads = peak_whole_grads_;
  m.units = units_with_params_;
  m.flat_params = static_cast<int64_t>(flats.size());
  for (auto& f : flats) {
    m.padded_numel += f->padded;
    // What stays allocated between steps, each buffer once: the float32 master and a compute
    // copy kept whole (NO_SHARD and ZeRO-1 in bf16; ZeRO-1's float32 master is part of it),
    // the reduced gradient shard and a gradient kept whole (NO_SHARD, ZeRO-1).
    const bool full_at_rest = f->master_in_full() || !free_after_backward_;
    m.params += (f->master_in_full() ? 0 : f->shard_numel * 4) + (full_at_rest ? f->full_bytes() : 0);
    const bool grad_at_rest = f->grad_shard_in_full() || !free_after_backward_;
    m.grads += (f->grad_shard_in_full() ? 0 : f->shard_numel * static_cast<int64_t>(f->grad_shard.element_size())) +
               (grad_at_rest ? f->grad_bytes() : 0);
  }
  for (auto& f : frozen_flats) {  // no gradients; not in the parameter counts, which are the trained ones
    const bool full_at_rest = f->master_in_full() || !free_after_backward_;
    m.frozen += (f->master_in_full() ? 0 : f->shard_numel * int64_t(f->master.element_size())) +
                (full_at_rest ? f->full_bytes() : 0);
  }
  return m;
}

// Gathers one flat parameter at a time (never the whole model on a rank).
bool FsdpTree::replicas_identical() {
  c10::NoGradGuard no_grad;
  bool same = true;
  std::vector<comm::Communicator*> groups;
  if (options.groups.shard) groups.push_back(options.groups.shard);
  if (options.groups.replica) groups.push_back(options.groups.replica);
  std::vector<FlatParam*> all;
  for (auto& f : flats) all.push_back(f.get());
  for (auto& f : frozen_flats) all.push_back(f.get());
  for (FlatParam* f : all) {
    at::Tensor full = f->master;
    if (options.groups.shard) {
      full = at::empty({f->padded}, f->master.options());
      options.groups.shard->all_gather(full, f->master.contiguous());
    }
    // Every rank's values equal the maximum over all ranks exactly when all agree.
    at::Tensor highest = full.clone();
    for (auto* g : groups) g->all_reduce(highest, comm::ReduceOp::Max);
    same = same && at::equal(full, highest);
  }
  at::Tensor differs = at::scalar_tensor(int64_t(same ? 0 : 1), at::kLong).reshape({1});
  for (auto* g : groups) g->all_reduce(differs, comm::ReduceOp::Max);
  return differs.item<int64_t>() == 0;
}

}  // namespace cadre::detail
