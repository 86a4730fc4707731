// A split of fixed-length token samples written as numbered shard files (data/token_shard.h),
// and the labels that instruction data stores beside its tokens: one label per token, the
// token itself where it is learned as a target, else one of three values above every id.
#pragma once

#include <cstdint>
#include <string>

#include "data/manifest.h"

namespace cadre {

// Label values that are not a token id: a prompt token (learned only with
// data.train_on_prompt), a padding token (never learned), and the first token of a document in
// a packed window (never learned: nothing before it in its document predicts it). Document
// starts are written only in packed datasets (manifest `packing: documents`).
struct LabelCodes {
  uint32_t prompt, padding, document_start;
};

// The width of a labels shard for this vocabulary: 2 bytes while the codes fit above every id.
uint32_t label_bytes(int64_t vocab_size);
LabelCodes label_codes(uint32_t label_bytes);

// Writes `samples` samples of `per` values from `values` into <dir>/<name>_00000.bin, ... of at
// most `shard_samples` samples each, as `bytes`-wide values; the manifest entries of the files.
std::vector<ShardEntry> token_split_write(const std::string& dir, const std::string& name, const uint32_t* values,
                                          uint64_t samples, uint64_t per, uint64_t shard_samples, uint32_t bytes);

}  // namespace cadre
