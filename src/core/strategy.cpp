// Strategy names, both ways.
#include "core/strategy.h"

#include "core/error.h"

namespace cadre {

Strategy parse_strategy(const std::string& name) {
  if (name == "FULL_SHARD") return Strategy::FullShard;
  if (name == "SHARD_GRAD_OP") return Strategy::ShardGradOp;
  if (name == "HYBRID_SHARD") return Strategy::HybridShard;
  if (name == "NO_SHARD") return Strategy::NoShard;
  if (name == "ZERO1") return Strategy::Zero1;
  throw ConfigError(
      str("parallel.strategy: unknown '", name, "' (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD, ZERO1)"));
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::FullShard: return "FULL_SHARD";
    case Strategy::ShardGradOp: return "SHARD_GRAD_OP";
    case Strategy::HybridShard: return "HYBRID_SHARD";
    case Strategy::NoShard: return "NO_SHARD";
    case Strategy::Zero1: return "ZERO1";
  }
  return "?";
}

}  // namespace cadre
