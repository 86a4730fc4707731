// Per-rank model-state memory against the ZeRO/FSDP formulas. With Ψ parameters on this rank
// (its tensor-parallel part: Ψ_model / tp for split parameters), N data-parallel ranks in the
// shard group, c bytes per compute element and K bytes of optimizer state per parameter
// (AdamW's two moments 8, SGD's momentum buffer 4, plain SGD 0); with AdamW:
//   FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD  16Ψ/N: float32 masters 4, gradients 4, AdamW's
//                                            two moments 8, each sharded ((8 + K)Ψ/N)
//   NO_SHARD                                 16Ψ, plus cΨ for a compute copy in another dtype
//   ZERO1                                    2cΨ + 12Ψ/N: compute parameters and gradients
//                                            whole, master and moments sharded; 4 + 12/N bytes
//                                            per parameter in bf16 (the ZeRO paper's stage 1),
//                                            8 + 8/N in float32 (the parameters are the master)
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "shard/fully_shard.h"

namespace cadre {

struct StateFormula {
  int64_t bytes = 0;
  std::string text;  // e.g. "(4 + 12/N) x 1.2M params, N = 2"
};

// The formula for `measured` (Ψ = its padded_numel, N = its shard_size).
StateFormula state_formula(Strategy strategy, const ShardMemory& measured, int64_t compute_bytes_per_param,
                           int64_t optimizer_bytes_per_param = 8);

struct MemoryReport {
  ShardMemory measured;
  StateFormula formula;
  int64_t peak_rss = 0;
  // On a GPU: the device ("cuda:0") and its caching allocator's peak of allocated bytes, the
  // GPU's counterpart of peak_rss; empty and -1 on the CPU.
  std::string device;
  int64_t peak_device = -1;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

MemoryReport memory_report(const ShardMemory& measured, int64_t optimizer_bytes, const StateFormula& formula);

}  // namespace cadre
