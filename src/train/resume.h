// Choosing and loading the checkpoint a run resumes from (checkpoint.resume):
//   auto  (default) the newest complete checkpoint that loads on every rank, or a fresh start
//         when there is none; damaged ones (checksum, missing or truncated shard) are skipped
//         with a warning and renamed *.corrupt
//   none  start fresh; refused when the checkpoint directory already holds checkpoints, so a
//         rerun never mixes two histories in one directory
//   PATH  that checkpoint, or an error
// Collective: every rank calls it, and all agree on the checkpoint they loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "comm/comm.h"
#include "core/config.h"
#include "train/batch_source.h"
#include "optim/optimizer.h"
#include "shard/fully_shard.h"

namespace cadre {

struct Resumed {
  int64_t step = 0;          // steps already done (0: fresh start)
  std::string path;          // the checkpoint loaded ("" when fresh)
  double load_s = 0;         // seconds to find, read and verify it
  int64_t skipped = 0;       // damaged checkpoints passed over
};

// `base_fingerprint`: a LoRA run's frozen base (adapter_checkpoint.h), which a checkpoint that
// leaves its base out must have been trained on. `held_elsewhere`: check_checkpoint_fits's.
Resumed resume_training(const Config& config, const std::string& checkpoint_dir, FSDPModule& model, Optimizer& optimizer,
                        BatchSource& train_data, int rank, comm::Communicator* group,
                        std::optional<uint64_t> base_fingerprint = std::nullopt,
                        const std::set<std::string>* held_elsewhere = nullptr);

}  // namespace cadre
