// Per-rank model-state memory against the ZeRO/FSDP formulas: with Ψ parameters sharded over
// N ranks, float32 masters (4Ψ/N), float32 gradients (4Ψ/N) and AdamW's two moments (8Ψ/N)
// make 16Ψ/N bytes; a resident compute copy adds its bytes (NO_SHARD with bf16: 2Ψ).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "shard/fully_shard.h"

namespace cadre {

struct MemoryReport {
  ShardMemory measured;
  int64_t formula_state = 0;  // 16 * padded Ψ / N (+ resident compute copy)
  int64_t peak_rss = 0;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

MemoryReport memory_report(const ShardMemory& measured, int64_t optimizer_bytes, bool resident_compute_copy,
                           int64_t compute_bytes_per_param);

}  // namespace cadre
