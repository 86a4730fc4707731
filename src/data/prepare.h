// `cadre data prepare`: text files -> tokenizer (the model's, or one trained here) -> packed fixed-length shards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/tokenizer.h"

namespace cadre {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories (searched recursively for *.txt)
  std::string out;                  // output directory
  int64_t vocab_size = 8192;        // when training a tokenizer
  std::string tokenizer;            // a .model, tokenizer.json or model folder to use instead of training one
  int64_t seq_len = 256;            // samples are seq_len + 1 tokens
  double val_fraction = 0.02;       // share of samples held out for validation (at least 1)
  int64_t seed = 1234;              // document order
  int64_t shard_samples = 65536;    // samples per shard file
  int threads = 2;
};

// Checks options and inputs (ConfigError naming the flag or path), then prepares the dataset.
DatasetManifest dataset_prepare(const PrepareOptions& options);

// The tokenizer `source` names (a .model, a tokenizer.json or a folder holding either) with its
// files copied into the dataset folder `out` (an earlier run's of another kind removed), loaded
// from there: a dataset's tokenizer is what its folder holds.
std::unique_ptr<Tokenizer> dataset_use_tokenizer(const std::string& source, const std::string& out);

// The text documents `inputs` names, sorted: explicit files as given, *.txt under directories.
std::vector<std::string> dataset_list_files(const std::vector<std::string>& inputs);

}  // namespace cadre
