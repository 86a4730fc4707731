// The dataset manifest (manifest.json) written by `cadre data prepare`: tokenizer, sample
// length, and the shard files of each split with their sizes and checksums.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

struct ShardEntry {
  std::string file;      // relative to the dataset directory
  uint64_t samples = 0;
  uint64_t checksum = 0;
};

struct DatasetManifest {
  int version = 1;
  std::string kind = "tokens";  // "tokens" (token shards), "images" (image shards) or "encoded_images"
  // tokens:
  std::string tokenizer;   // relative path of the SentencePiece model
  // "sha256:..." of that model when the data was prepared (data/tokenizer_identity.h); "" in
  // manifests written before it was kept.
  std::string tokenizer_identity;
  int64_t vocab_size = 0;
  int64_t seq_len = 0;     // every sample holds seq_len + 1 tokens
  uint32_t token_bytes = 2;
  int64_t bos_id = -1, eos_id = -1;
  uint64_t documents = 0, tokens = 0;
  // Instruction data (instruct/instruction_prepare.h): a labels shard beside each token shard,
  // sample for sample, in the same format (data/token_split.h says what a label holds).
  // Empty for raw text, where every next token is learned.
  std::vector<ShardEntry> train_labels, val_labels;
  bool labelled() const { return !train_labels.empty(); }
  // Labelled data's layout: "pad" (one sample per window) or "documents" (samples packed into
  // windows, each attending only to itself; its labels mark where each document starts).
  std::string packing = "pad";
  bool packed() const { return labelled() && packing == "documents"; }
  // images: every sample is one image of channels x height x width bytes and a label below
  // num_classes; loaders normalise pixels as (p / 255 - pixel_mean) / pixel_std.
  int64_t channels = 0, height = 0, width = 0, num_classes = 0;
  double pixel_mean = 0, pixel_std = 1;
  // encoded_images (JPEG/PNG bytes, data/encoded_shard.h): 3 channels, the class names in label
  // order (an ImageFolder's sorted sub-directories) and how many files prepare skipped as
  // corrupt; height and width are 0 (the loader's output size is a training setting).
  std::vector<std::string> classes;
  uint64_t skipped = 0;
  std::vector<ShardEntry> train, val;
};

// Reads <dir>/manifest.json; ConfigError naming the file when missing or malformed.
DatasetManifest manifest_read(const std::string& dir);
// Parses manifest text (`path` names it in errors) and checks the shapes the loader relies on:
// seq_len and vocab_size positive, token width 2 or 4, no negative or overflowing counts.
DatasetManifest manifest_parse_text(const std::string& text, const std::string& path);
// Writes <dir>/manifest.json atomically.
void manifest_write(const std::string& dir, const DatasetManifest& manifest);

}  // namespace cadre
