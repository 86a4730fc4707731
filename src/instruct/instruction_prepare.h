// `cadre data prepare` of instruction and chat JSONL: each line a sample (instruct/
// instruction_sample.h), rendered with the model's chat template and tokenized with its
// tokenizer, stored as fixed-length token samples with a labels shard beside each token shard
// (data/token_split.h): what the loss learns (the answers), the prompt, and the padding.
//
// Layout (`packing`): "pad", one sample per window of seq_len + 1 tokens, padded after its end;
// or "documents", samples packed whole into windows in order, each window's tail padded, with
// each sample's first token labelled as a document start: training then restricts attention to
// each document and restarts its positions (models see Batch::documents), so a packed sample
// learns what it would alone, in fewer windows. A sample longer than the window keeps its first
// seq_len + 1 tokens (truncated); one with no learned target left within them is dropped. Both
// are counted in the log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace cadre {

struct InstructionPrepareOptions {
  std::vector<std::string> inputs;  // .jsonl files
  std::string out;
  std::string tokenizer;            // the model's: a .model, a tokenizer.json or a model folder
  std::string chat_template;        // ChatTemplate::load's spec; empty: the tokenizer folder's own
  std::string packing = "pad";
  int64_t seq_len = 256;
  double val_fraction = 0.02;
  int64_t seed = 1234;              // sample order before the validation share is cut off
  int64_t shard_samples = 65536;
};

// The inputs' lines are checked and encoded first: a malformed line, a shape none of the
// accepted ones or a conversation the template refuses is a ConfigError naming file:line, and
// nothing is written but the tokenizer's files.
DatasetManifest instruction_prepare(const InstructionPrepareOptions& options);

// True when `path` names a JSONL file (ends in .jsonl).
bool is_jsonl_path(const std::string& path);

}  // namespace cadre
