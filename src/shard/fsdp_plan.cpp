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
  for (const auto& b : root_->buffers(/*recurse=*/true)) out.buffer_bytes += b.numel() * int64_t(b.element_size());
  if (!sharded()) {  // NO_SHARD: whole buffers, in buckets that need no padding
    FlatPlan all{"buckets", 0, 0, 0}, frozen{"frozen", 0, 0, 0};
    for (const auto& p : params.params) (p.requires_grad() ? all : frozen).numel += p.numel();
    for (FlatPlan* f : {&all, &frozen}) f->padded = f->shard_numel = f->numel;
    if (all.numel > 0) out.flats.push_back(all);
    if (frozen.numel > 0) out.frozen.push_back(frozen);
    return out;
  }
  for (auto& u : units) {
    FlatPlan trained{u->name, 0, 0, 0}, frozen{u->name, 0, 0, 0};
    for (const auto& p : params.params) {
      auto it = owner.find(p.unsafeGetTensorImpl());
      if (it != owner.end() && it->second == u->index) (p.requires_grad() ? trained : frozen).numel += p.numel();
    }
    if (trained.numel > 0) out.flats.push_back(trained);
    if (frozen.numel > 0) out.frozen.push_back(frozen);
  }
  return out.regrouped(out.shard_group);
}

}  // namespace cadre::detail
