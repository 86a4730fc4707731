// A tokenizer's identity: what data prepared with it records and what fine-tuning checks
// against the model's own tokenizer (train/data_tokenizer_check.h).
#pragma once

#include <string>

namespace cadre {

// "sha256:<64 hex digits>" of the tokenizer file's bytes (a SentencePiece .model). Two files
// with one identity give the same ids for every text. Error naming the file when it cannot be
// read.
std::string tokenizer_identity(const std::string& path);

}  // namespace cadre
