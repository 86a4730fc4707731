// Writes one rank's snapshot into a checkpoint directory: its rank file (the pieces end to
// end, CRC-32C of each computed on the way), fsynced, then its index (a one-file manifest).
#pragma once

#include <string>

#include "ckpt/manifest.h"
#include "ckpt/snapshot.h"

namespace cadre {

// `header` supplies step, world size, strategy, state and config; the returned index adds
// this rank's file and pieces and is also written to <dir>/rank-NNNNN.index.json.
// Errors name the rank, the file and the system error (e.g. "No space left on device").
CheckpointManifest rank_write(const std::string& dir, int64_t rank, const Snapshot& snapshot,
                              const CheckpointManifest& header);

}  // namespace cadre
