// The KV-cache budget of `cadre serve`: --kv-cache-memory read as bytes or as a fraction of the
// memory available, its default, and how many cached tokens it holds in the decoder's blocks.
#pragma once

#include <cstdint>
#include <string>

#include "models/model.h"

namespace cadre {

struct KvCacheBudget {
  int64_t bytes = 0;   // the budget as given (or the default); the whole cache when allocated up front
  int64_t tokens = 0;  // cached positions it holds, whole blocks; 0: no limit beyond the slots
  std::string origin;  // how it was chosen, for the startup log
};

// "8GiB", "500MB", "1073741824" (KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB binary; any case),
// or a fraction of `available_bytes` with a decimal point ("0.5"). ConfigError naming the flag.
int64_t kv_cache_memory_bytes(const std::string& text, int64_t available_bytes);

// The budget for `decoder`: `flag` ("" for the default: every slot's whole context, capped at
// half of `available_bytes`). A decoder that allocated its caches up front (a GPU's) needs a
// budget that covers them. ConfigError when the budget holds less than one block.
KvCacheBudget kv_cache_budget(const std::string& flag, const Decoder& decoder, int64_t available_bytes);

// For the startup log: "budget 512.0 MB (how) = 4096 tokens, 4 whole contexts, in blocks of 256".
std::string kv_cache_description(const KvCacheBudget& budget, const Decoder& decoder);

}  // namespace cadre
