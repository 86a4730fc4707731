// Buffers (BatchNorm statistics) and frozen parameters are not sharded: before each training
// forward they are broadcast from rank 0, as DDP's broadcast_buffers, under every strategy.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>

#include "shard/fsdp_tree.h"

namespace cadre::detail {

void FsdpTree::broadcast_buffers() {
  // Rank 0's values: it is index 0 of its replica group and of its shard group, so a broadcast
  // over replicas, then over the shard group, reaches everyone. Coalesced per dtype.
  std::vector<comm::Communicator*> hops;
  if (options.groups.replica) hops.push_back(options.groups.replica);
  if (options.groups.shard) hops.push_back(options.groups.shard);
  if (hops.empty()) return;
  c10::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& [name, t] : unsharded)
    if (!t.requires_grad()) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, tensors] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    for (auto* group : hops) group->broadcast(packed, 0);
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace cadre::detail
