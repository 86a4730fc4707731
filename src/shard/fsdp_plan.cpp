// FsdpTree::plan: what build_flats (fsdp_layout.cpp) will allocate, from the same ownership
// and grouping, computed from the parameters' shapes alone, so it works on a deferred model
// before any storage exists (and after set-up, for the same answer).
#include "shard/fsdp_tree.h"

namespace cadre::detail {

ShardPlan FsdpTree::plan() {
  check_not_absorbed();
  if (!initialized_) set_root();
  const RootParams params = root_params(*root_);
  const Ownership owner = assign_owners(params);
  comm::Communicator* shard = options.groups.shard;
  ShardPlan out;
  out.strategy = options.strategy;
  out.shard_group = sharded() && shard ? shard->size() : 1;
  auto trainable = [&](const at::Tensor& p) { return p.requires_grad() && owner.count(p.unsafeGetTensorImpl()); };
  for (const auto& p : params.params)
    if (!trainable(p)) out.frozen_bytes += p.numel() * int64_t(sizeof(float));
  for (const auto& b : root_->buffers(/*recurse=*/true)) out.buffer_bytes += b.numel() * int64_t(b.element_size());
  if (!sharded()) {  // NO_SHARD: whole buffers, in buckets that need no padding
    FlatPlan all{"buckets", 0, 0, 0};
    for (const auto& p : params.params)
      if (trainable(p)) all.numel += p.numel();
    all.padded = all.shard_numel = all.numel;
    if (all.numel > 0) out.flats.push_back(all);
    return out;
  }
  for (auto& u : units) {
    FlatPlan f{u->name, 0, 0, 0};
    for (const auto& p : params.params) {
      auto it = owner.find(p.unsafeGetTensorImpl());
      if (p.requires_grad() && it != owner.end() && it->second == u->index) f.numel += p.numel();
    }
    if (f.numel > 0) out.flats.push_back(f);
  }
  return out.regrouped(out.shard_group);
}

}  // namespace cadre::detail
