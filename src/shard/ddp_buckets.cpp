// NO_SHARD is DDP: parameters in gradient buckets, and a bucket's gradient all-reduced whole
// over the replicas. The same all-reduce serves any strategy whose shard group is one rank
// (HYBRID_SHARD with shard_group_size 1): its units are replicas too. When the buckets launch
// (in index order) is the schedule's decision (fsdp_schedule.cpp).
#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "shard/fsdp_tree.h"

namespace cadre::detail {

// Parameters in reverse registration order (roughly the order their gradients complete), the
// first bucket capped at 1 MiB so the first reduction starts early, the others at
// bucket_bytes (DDP's bucket_cap_mb).
std::vector<std::vector<at::Tensor>> FsdpTree::group_into_buckets(const RootParams& root, const Ownership& owner,
                                                                  std::vector<std::string>& flat_names) const {
  std::vector<std::vector<at::Tensor>> by_flat;
  int64_t cap = std::min<int64_t>(int64_t{1} << 20, options.bucket_bytes), bytes = 0;
  for (auto it = root.params.rbegin(); it != root.params.rend(); ++it) {
    if (!it->requires_grad() || !owner.count(it->unsafeGetTensorImpl())) continue;
    if (by_flat.empty() || bytes >= cap) {
      if (!by_flat.empty()) cap = options.bucket_bytes;
      by_flat.emplace_back();
      flat_names.push_back(str("bucket", by_flat.size() - 1));
      bytes = 0;
    }
    by_flat.back().push_back(*it);
    bytes += it->numel() * 4;
  }
  return by_flat;
}

// Averages the whole gradient over the replicas in place (in reduce_dtype); without replicas
// there is nothing to send, and fold_whole_gradient copies a low-precision one back.
bool FsdpTree::start_whole_all_reduce(size_t k) {
  FlatState& st = *state_[k];
  st.reduce_in = flats[k]->grad_full.to(options.mixed_precision.reduce_dtype);  // the buffer itself when the dtypes agree
  st.reduce_out = st.reduce_in;
  if (!options.groups.replica) return false;
  st.reduce_work = options.groups.replica->all_reduce_async(st.reduce_in, comm::ReduceOp::Avg);
  return true;
}

// The averaged gradient is the flat gradient itself unless it was reduced in another dtype.
void FsdpTree::fold_whole_gradient(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (!st.reduce_out.is_same(f.grad_full)) f.grad_full.copy_(st.reduce_out);
}

}  // namespace cadre::detail
