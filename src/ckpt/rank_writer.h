// Writes one rank's part of a checkpoint directory: its rank file (pieces end to end, the
// CRC-32C of each and of each of its checksum blocks computed on the way), fsynced, then its
// index (a one-file manifest). Pieces come from a staged Snapshot (training) or one at a time
// (import, which never holds more than one tensor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/snapshot.h"

namespace cadre {

class RankFileWriter {
 public:
  // `header` supplies step, world size, strategy, state and config for the index.
  RankFileWriter(const std::string& dir, int64_t rank, const CheckpointManifest& header);
  ~RankFileWriter();
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  // Appends the elements of `box` of `tensor` (global `shape`, `dtype`), row-major in the box.
  void append(const std::string& tensor, const std::string& dtype, const std::vector<int64_t>& shape, const Box& box,
              const char* bytes);
  // fsyncs and closes the file, writes <dir>/rank-NNNNN.index.json and returns the index.
  CheckpointManifest finish();

 private:
  class File;
  std::string dir_;
  int64_t rank_;
  std::string name_;
  CheckpointManifest index_;
  std::unique_ptr<File> file_;
};

// A staged snapshot through a RankFileWriter. Errors name the rank, the file and the system
// error (e.g. "No space left on device").
CheckpointManifest rank_write(const std::string& dir, int64_t rank, const Snapshot& snapshot,
                              const CheckpointManifest& header);

}  // namespace cadre
