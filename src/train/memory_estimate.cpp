// estimate_memory (memory_estimate.h): FlatParam's allocations (shard/flat_param.cpp) per
// strategy, with S the elements this rank keeps of the trainable parameters, N all of them
// (padded), U the largest unit's, c the compute dtype's bytes, g a whole gradient's (c on the
// CPU when sharded over more than one rank: the reduce-scatter widens it; else 4) and K the
// optimizer's bytes per parameter:
//   FULL_SHARD, HYBRID_SHARD  4S masters, 4S gradients, KS state; the root unit (R elements)
//                             stays whole through the step (its forward and backward enclose
//                             the others'), and beside it two other units (the one computing
//                             and the next, gathered ahead), each with its gradient:
//                             (R + 2U')(c + g), U' the largest other unit (R + U' without
//                             prefetch)
//   SHARD_GRAD_OP             the same, but every unit stays whole from the forward to its
//                             backward: Nc + 2Ug
//   NO_SHARD                  4N (+ cN for a compute copy in another dtype), 4N, KN
//   ZERO1                     cN compute parameters (the master when c = 4, else + 4S),
//                             cN whole gradients, KS
// Accumulating unsharded keeps every unit's whole gradient between micro-batches: + Ng.
// Frozen parameters (F of them kept, the largest unit's Uf) hold masters of f bytes (4, or c
// for a LoRA base kept in the compute dtype) and compute copies, nothing else: sharded fF, and
// a unit held whole holds its frozen part too (FULL_SHARD: each unit held whole counts its
// U(c + g) + Uf c); NO_SHARD fF (+ cF when c != f); ZERO1 cF (+ fF' where F' is its own block, c != f).
// Loading only (train.steps 0) allocates no optimizer and touches no sharded gradient. Each
// buffer is counted as the pages it makes resident (huge pages round it up; estimate_memory).
#include "train/memory_estimate.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "core/byte_size.h"

namespace cadre {

int64_t MemoryEstimate::total() const {
  return params + frozen + grads + optimizer + gathered + (activations > 0 ? activations : 0) + unsharded + checkpoint;
}

std::string MemoryEstimate::to_text() const {
  std::string text = "parameters " + format_bytes(params) + " + gradients " + format_bytes(grads) + " + optimizer " +
                     format_bytes(optimizer) + " + gathered units " + format_bytes(gathered) + " + activations " +
                     (activations < 0 ? std::string("(not estimated for this model)") : format_bytes(activations));
  if (frozen > 0) text += " + frozen parameters " + format_bytes(frozen);
  if (unsharded > 0) text += " + buffers " + format_bytes(unsharded);
  if (checkpoint > 0) text += " + checkpoint staging " + format_bytes(checkpoint);
  return text + " = " + format_bytes(total());
}

nlohmann::json MemoryEstimate::to_json() const {
  return {{"params", params},       {"frozen", frozen},         {"grads", grads},
          {"optimizer", optimizer}, {"gathered", gathered},     {"activations", activations},
          {"unsharded", unsharded}, {"checkpoint", checkpoint}, {"total", total()}};
}

namespace {

// Resident bytes of one allocation: with transparent huge pages (the CPU block cache asks for
// them) a block of 2 MiB or more is made resident in whole 2 MiB pages.
int64_t resident(int64_t bytes, int64_t page) {
  return page > 0 && bytes >= page ? (bytes + page - 1) / page * page : bytes;
}

// Σ over flat parameters of one buffer of `bytes_per_element` x (shard or padded) elements each.
int64_t per_flat(const std::vector<FlatPlan>& flats, int64_t bytes_per_element, bool whole, int64_t page) {
  int64_t sum = 0;
  for (const auto& f : flats) sum += resident(bytes_per_element * (whole ? f.padded : f.shard_numel), page);
  return sum;
}

// What sharded units hold gathered at a step's peak: the root's parameters, whole from its
// forward's start to its backward's end, with its whole gradient, and beside it `others` of the
// other units at once, counted as the largest. A unit held whole: its trainable parameters in
// the compute dtype with their whole gradient, and its frozen ones in the compute dtype (the
// flat parameters of one unit share its name).
int64_t gathered_working_set(const ShardPlan& plan, int64_t c, int64_t g, int64_t page, int64_t others) {
  std::map<std::string, int64_t> bytes;
  for (const auto& f : plan.flats) bytes[f.unit] += resident(f.padded * c, page) + resident(f.padded * g, page);
  for (const auto& f : plan.frozen) bytes[f.unit] += resident(f.padded * c, page);
  int64_t root = 0, most = 0;
  for (const auto& [unit, b] : bytes) {
    if (unit == kRootUnit) root = b;
    else most = std::max(most, b);
  }
  return root + others * most;
}

}  // namespace

MemoryEstimate estimate_memory(const EstimateInputs& in) {
  const ShardPlan& plan = in.plan;
  const int64_t S = plan.shard_numel(), N = plan.padded_numel(), U = plan.largest_padded(), page = in.huge_page_bytes;
  const int64_t c = in.compute_bytes, K = in.optimizer_bytes_per_param, f = in.frozen_master_bytes;
  const int64_t g = plan.shard_group > 1 && in.cpu ? c : 4;
  auto shards = [&](int64_t bytes_per_element) { return per_flat(plan.flats, bytes_per_element, false, page); };
  auto wholes = [&](int64_t bytes_per_element) { return per_flat(plan.flats, bytes_per_element, true, page); };
  auto frozen_shards = [&](int64_t bytes_per_element) { return per_flat(plan.frozen, bytes_per_element, false, page); };
  auto frozen_wholes = [&](int64_t bytes_per_element) { return per_flat(plan.frozen, bytes_per_element, true, page); };
  MemoryEstimate e;
  e.unsharded = plan.buffer_bytes;
  switch (plan.strategy) {
    case Strategy::NoShard:
      e.params = wholes(4) + (c != 4 ? wholes(c) : 0);
      e.frozen = frozen_wholes(f) + (c != f ? frozen_wholes(c) : 0);
      e.grads = wholes(4);
      e.optimizer = K * N;
      break;
    case Strategy::Zero1:
      e.params = wholes(c) + (c != 4 ? shards(4) : 0);
      e.frozen = frozen_wholes(c) + (c != f ? frozen_shards(f) : 0);
      e.grads = wholes(c);
      e.optimizer = K * S;
      break;
    default: {
      const int64_t units_whole = in.prefetch ? 2 : 1;
      e.params = shards(4);
      e.frozen = frozen_shards(f);
      e.grads = 4 * S;      // mapped directly, not from the block cache: no huge pages
      e.optimizer = K * S;  // one tensor per parameter's piece, most of them small
      e.gathered = plan.strategy == Strategy::ShardGradOp
                       ? wholes(c) + frozen_wholes(c) + units_whole * resident(U * g, page)
                       : gathered_working_set(plan, c, g, page, units_whole);
      if (in.accumulate_unsharded) e.grads += wholes(g);
    }
  }
  if (!in.training) {
    e.optimizer = e.gathered = 0;
    if (strategy_shards_parameters(plan.strategy)) e.grads = 0;  // zero pages until a backward writes them
  }
  e.activations = in.training ? in.activations : 0;
  if (in.training && in.periodic_checkpoints && in.cpu) {
    // What stage_train_state copies: each float32 shard piece this rank writes with its
    // optimizer states (K bytes per element), and its frozen pieces (not a LoRA run's base);
    // replicas split the writing.
    const int64_t frozen = in.checkpoint_frozen ? f * plan.frozen_shard_numel() : 0;
    const int64_t staged = ((4 + K) * plan.shard_numel() + frozen) / std::max<int64_t>(1, in.replicas);
    const int64_t overlapped = e.gathered + std::max<int64_t>(0, e.activations);
    e.checkpoint = in.async_checkpoints ? staged : std::max<int64_t>(0, staged - overlapped);
  }
  return e;
}

int64_t host_huge_page_bytes() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  std::getline(in, setting);
  const bool on = setting.find("[always]") != std::string::npos || setting.find("[madvise]") != std::string::npos;
  return on ? int64_t(2) << 20 : 0;
}

}  // namespace cadre
