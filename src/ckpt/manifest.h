// The manifest of a sharded checkpoint (manifest.json): for every tensor its global shape and
// dtype and which byte ranges of which rank files hold which box of it (offset and length per
// dimension, as PyTorch DCP's chunks), with a CRC-32C per piece and per fixed-size block of a
// piece (so a rank that needs part of a piece reads and checks only the blocks holding it); plus
// the training state (step, data position, ...) and the run's config. A rank's own index (what it wrote) uses the same
// structure with one file; the lead merges them. Version 1 manifests (pieces as ranges of the
// flattened tensor) still parse and read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/box.h"

namespace cadre {

// A box of the tensor, its elements row-major at `offset` in file `file`. A version-1 piece
// (`flat`) is elements [box.offsets[0], + box.sizes[0]) of the flattened tensor instead.
struct PieceRecord {
  int64_t file = 0;  // index into CheckpointManifest::files
  int64_t offset = 0;
  Box box;
  bool flat = false;
  uint32_t crc32c = 0;  // of the whole piece
  // CRC-32C of each CheckpointManifest::checksum_block_bytes of the piece's bytes, the last
  // block shorter; empty for a piece of one block, and in checkpoints written before blocks
  // (such a piece is read and checked whole).
  std::vector<uint32_t> block_crc32c{};
  int64_t numel() const { return box.numel(); }
};

struct TensorRecord {
  std::string dtype;  // "float32", "uint8", ... (dtype_element_size knows them)
  std::vector<int64_t> shape;
  std::vector<PieceRecord> pieces;  // disjoint, covering every element exactly once
  int64_t numel() const;
  // Where piece `p`'s elements are in the flattened tensor, in its storage order.
  std::vector<Run> runs(const PieceRecord& p) const;
};

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  int64_t bytes = 0;
  int64_t rank = 0;  // the rank that wrote it
};

// The state key of a checkpoint that holds the trained parameters alone, without the frozen
// base they were trained on (a LoRA run's adapters): the fingerprint of that base
// (core/value_fingerprint.h, as an int64's bits). Resuming and exporting read the base from
// where the run read it and check it against this.
inline constexpr const char* kBaseFingerprintState = "base_fingerprint";

struct CheckpointManifest {
  static constexpr int kVersion = 2;  // 2: boxes; 1: ranges of the flattened tensor
  // 4 MiB: a rank reads at most a block more than it needs at each end of its part of a
  // piece, and a 70B model's training state (~830 GB) needs ~200k checksums (~2 MB of JSON).
  static constexpr int64_t kChecksumBlockBytes = int64_t(4) << 20;
  int version = kVersion;
  // The block size of the pieces' block_crc32c (a multiple of 8, so blocks hold whole elements
  // of any dtype); 0 in manifests written before blocks.
  int64_t checksum_block_bytes = kChecksumBlockBytes;
  int64_t step = 0;
  int64_t world_size = 1;
  std::string strategy;                 // sharding strategy of the writing job
  std::map<std::string, int64_t> state; // trainer state: data_position, optimizer_steps, ...
  std::string config_yaml;              // the run's config, for export and for humans
  std::vector<FileRecord> files;
  std::map<std::string, TensorRecord> tensors;
};

int64_t dtype_element_size(const std::string& dtype);  // Error on an unknown name

// Whether the checkpoint leaves its frozen base out (kBaseFingerprintState is in its state).
inline bool manifest_leaves_out_base(const CheckpointManifest& m) { return m.state.count(kBaseFingerprintState) > 0; }

// The checksum blocks of a piece of `bytes` bytes: blocks of `block_bytes`, the last shorter;
// none (the piece is checked whole) when it fits one block or `block_bytes` is 0.
int64_t checksum_block_count(int64_t bytes, int64_t block_bytes);

std::string manifest_to_json(const CheckpointManifest& manifest);

// What a manifest's pieces must cover: a checkpoint's manifest.json holds every element of
// every tensor exactly once; a rank's own index (rank-N.index.json) only what that rank wrote.
enum class PieceCoverage { Complete, Partial };

// Parses and checks structure (version, file indices, shapes, piece bounds, all with checked
// arithmetic) and, for PieceCoverage::Complete, coverage. CheckpointError naming `source` and
// the offending field otherwise: a damaged manifest never loads shifted or partial weights.
CheckpointManifest manifest_parse(const std::string& text, const std::string& source,
                                  PieceCoverage coverage = PieceCoverage::Complete);

// Why `tensor`'s pieces do not hold each of its elements exactly once: "" when they tile it
// (in any order); otherwise the first gap or overlap in flattened order ("elements 10..12 are
// missing"). The one place that decides coverage: manifest_parse and manifest_merge use it.
std::string pieces_coverage_problem(const TensorRecord& tensor);

// Folds rank indexes into one manifest: files appended, pieces renumbered, then every tensor
// checked to be covered exactly once (Error naming the tensor and the gap or overlap).
CheckpointManifest manifest_merge(const std::vector<CheckpointManifest>& ranks);

}  // namespace cadre
