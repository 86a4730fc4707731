// The data-parallel strategy by name: parsed once, where the config is loaded (core/config.cpp),
// into the enum that the trainer, shard/ and deploy/ use. FSDP's names: FULL_SHARD,
// SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD; and ZERO1 (shard/fully_shard.h says what each does).
#pragma once

#include <string>

namespace cadre {

enum class Strategy { FullShard, ShardGradOp, HybridShard, NoShard, Zero1 };

// ConfigError naming parallel.strategy and the valid names for anything else.
Strategy parse_strategy(const std::string& name);
// The name parse_strategy reads (configs, logs, checkpoint headers, summaries).
const char* strategy_name(Strategy strategy);
// FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD: parameters and gradients sharded at rest (NO_SHARD
// and ZERO1 keep them whole).
inline bool strategy_shards_parameters(Strategy s) { return s != Strategy::NoShard && s != Strategy::Zero1; }

}  // namespace cadre
