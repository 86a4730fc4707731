// A checkpoint exported as a Hugging Face folder the way transformers' save_pretrained writes
// one, streamed: one tensor at a time read from the checkpoint's pieces in chunks of at most
// 64 MiB, converted to the dtype asked for and written straight into safetensors files of at
// most a given size, with model.safetensors.index.json when there are several, config.json
// (`dtype` and, for older readers, `torch_dtype`), generation_config.json and the tokenizer
// files the model came with (ckpt/model_origin.h) copied byte for byte. Peak memory is one
// chunk and its converted copy, whatever the model's size. Under `cadre run` each rank writes
// the files of its own share and the lead the small files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_saver.h"
#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "core/param_source.h"

namespace cadre {

// bos and eos ids of a SentencePiece model file.
using TokenizerIds = std::function<std::pair<int64_t, int64_t>(const std::string& tokenizer_model)>;

inline constexpr uint64_t kHfDefaultMaxFileBytes = 50'000'000'000;  // transformers 5's "50GB"

// A LoRA adapter merged into the weight it adapts as that is written: W + scale * B A, in float32
// (checkpoint tensor names; ckpt/lora_export.h).
struct HfMerge {
  std::string a, b;
  double scale = 0;
};

struct HfExportOptions {
  std::string out;                                // the folder (created; earlier weights files in it replaced)
  std::string dtype;                              // float32|bfloat16|float16 (or fp32|bf16|fp16); "": the origin's, else bfloat16
  uint64_t max_file_bytes = kHfDefaultMaxFileBytes;
  std::string tokenizer;                          // a SentencePiece model to ship instead of the origin's
  int64_t rank = 0, world_size = 1;
  AgreeFn agree;                                  // collective over the ranks (null with one process)
  TokenizerIds tokenizer_ids;                     // null: a SentencePiece model's ids read as 1 and 2
  std::map<std::string, HfMerge> merges;          // by the checkpoint name of the weight merged into
  // Tensors the checkpoint leaves out (a LoRA run's frozen base), by checkpoint name
  // ("model.<param>") with their shapes, read as float32 from `base` (by the model's names).
  const ParamSource* base = nullptr;
  std::map<std::string, std::vector<int64_t>> base_tensors;
};

// Writes the folder from `reader`'s checkpoint (trained with `config`), exporting checkpoint
// tensor -> external name `names`. Returns this rank's summary line.
std::string hf_export(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
                      const std::map<std::string, std::string>& names, const HfExportOptions& options);

// Bytes of a --max-shard-size, parsed as transformers parses max_shard_size ("100MB" = 10^8,
// "100MiB" = 100 x 2^20, "5Gb" = 5 x 10^9 bits); ConfigError naming the flag otherwise.
uint64_t hf_parse_size(const std::string& text);

// The dtype an export's --dtype names; ConfigError for another.
at::ScalarType hf_export_dtype(const std::string& name);

}  // namespace cadre
