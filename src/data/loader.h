// Deterministic, resumable reader of packed token shards. The training split is read in a
// seeded random order per epoch; a position is the number of samples consumed globally, so
// it means the same thing at any world size and is all that resume needs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/sample_order.h"
#include "data/token_split.h"
#include "data/token_shard.h"

namespace cadre {

class TokenLoader {
 public:
  // Opens <dir>/manifest.json and memory-maps the split's shards (and labels shards),
  // verifying checksums. `train_on_prompt`: a labelled dataset's prompt tokens are learned too.
  TokenLoader(const std::string& dir, Split split, uint64_t seed, bool train_on_prompt = false);

  int64_t seq_len() const { return manifest_.seq_len; }
  uint64_t num_samples() const { return total_; }
  const DatasetManifest& manifest() const { return manifest_; }
  // Instruction data: each sample comes with labels, the token where it is learned, else -100.
  bool labelled() const { return !labels_.empty(); }

  // Packed instruction data: a window holds several documents (manifest packing "documents").
  bool packed() const { return manifest_.packed(); }

  // Consumes `global_samples` samples (one global micro-batch of every rank) and writes
  // samples [first, first + count) of them into `out` (count * (seq_len + 1) tokens), and their
  // labels into `labels` when labelled() (else it may be null). When packed(), `starts` (count
  // vectors, else it may be null) gets where each window's documents begin: token offsets in
  // [0, seq_len + 1), ascending, the first 0.
  // Train: shuffled order, new order each epoch. Val: file order.
  void next(uint64_t global_samples, uint64_t first, uint64_t count, int64_t* out, int64_t* labels = nullptr,
            std::vector<int64_t>* starts = nullptr);

  // Copies sample `index` (in split order, no shuffling) into `out`, its labels and document
  // starts as above.
  void sample(uint64_t index, int64_t* out, int64_t* labels = nullptr, std::vector<int64_t>* starts = nullptr) const;

  uint64_t position() const { return consumed_; }
  void set_position(uint64_t consumed) { consumed_ = consumed; }

 private:
  DatasetManifest manifest_;
  std::vector<ShardReader> shards_, labels_;
  LabelCodes codes_{};
  bool train_on_prompt_ = false;
  std::vector<uint64_t> shard_start_;  // first sample index of each shard
  uint64_t total_ = 0;
  uint64_t consumed_ = 0;
  std::unique_ptr<SampleOrder> order_;
};

}  // namespace cadre
