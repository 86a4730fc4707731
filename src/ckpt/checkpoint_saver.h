// Saves sharded checkpoints: every rank writes its own file in parallel, then the lead merges
// the ranks' indexes into manifest.json and publishes the directory (rename, COMMITTED, prune
// to `keep`). With `async`, a background thread does the writing and the commit while training
// goes on; at most one save is in flight, so the memory cost is one staged copy of this rank's
// part. Every rank learns whether a save committed: the ranks agree twice per save (all
// written? all committed?) through `agree`, a collective the caller provides (a dedicated
// communicator, so it never interleaves with training's collectives).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "ckpt/manifest.h"
#include "ckpt/snapshot.h"

namespace cadre {

struct SaverOptions {
  std::string dir;  // holds the step-* directories
  int64_t rank = 0, world_size = 1;
  int64_t keep = 3;
  bool async = true;
};

// True on every rank iff every rank passed true. Collective over all ranks.
using AgreeFn = std::function<bool(bool ok)>;

struct SaveStats {
  int64_t step = -1;       // of the last committed save
  int64_t bytes = 0;       // this rank's file
  double write_s = 0;      // this rank: writing and syncing its file
  double total_s = 0;      // submit to committed, as this rank saw it
};

// The lead's part of a save, once every rank wrote its file and index into
// <dir>/.step-N.partial: merges the indexes into manifest.json and publishes the directory
// (rename, COMMITTED, prune to `keep`).
void checkpoint_commit(const std::string& dir, int64_t step, int64_t world_size, int64_t keep);

class CheckpointSaver {
 public:
  CheckpointSaver(SaverOptions options, AgreeFn agree);
  // Waits for a save in flight; its error, if any, is logged (destructors must not throw):
  // call wait() first to have it thrown.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Waits until no save is running (rethrowing its error), then hands out the snapshot buffer
  // to fill. Seconds spent waiting are in last_stage_wait_s().
  Snapshot& stage();
  // Saves what was staged as checkpoint `header.step` (header: step, world size, strategy,
  // state, config). Synchronous unless options.async.
  void submit(CheckpointManifest header);
  // Rethrows the error of a failed save without waiting.
  void check();
  // Waits for the save in flight; rethrows its error.
  void wait();
  // The step of a save submitted and not yet finished (written, agreed, committed), or -1.
  int64_t in_flight() const;

  double last_stage_wait_s() const { return last_stage_wait_s_; }
  SaveStats last_stats() const;

 private:
  void run();  // the writer thread
  void save(const CheckpointManifest& header);  // the work of one save, on whichever thread
  void commit(const CheckpointManifest& header);  // lead only

  SaverOptions options_;
  AgreeFn agree_;
  Snapshot snapshot_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool pending_ = false, busy_ = false, stopping_ = false;
  CheckpointManifest header_;
  std::exception_ptr error_;
  SaveStats stats_;
  double last_stage_wait_s_ = 0;
};

}  // namespace cadre
