// Export of a trained checkpoint to the formats other tools load: a Hugging Face folder
// (ckpt/hf_export.h: streamed, sharded safetensors in the dtype asked for, config.json, the
// tokenizer files the model came with), a
// .pt file that Python's torch.load reads, and a PyTorch distributed checkpoint directory
// (ckpt/dcp_export.h) whose chunks are the checkpoint's own boxes. The model supplies the
// names through its StateDictAdapter; a model without one exports its own names to .pt and
// DCP only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/hf_export.h"
#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "core/param_source.h"

namespace cadre {

// The frozen base of a LoRA run whose checkpoints leave it out, read from where the run read it
// (train.init_from, or the initialisation of train.seed): its parameters by the model's names.
struct BaseWeights {
  std::shared_ptr<const ParamSource> source;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::string description;  // for messages
};
using BaseFor = std::function<BaseWeights(const Config&)>;

struct ExportOptions {
  std::string checkpoint; // a checkpoint, or a run/checkpoint directory (newest complete one)
  std::string format;     // "hf" (a folder), "peft" (a LoRA run's adapters, a folder), "pt" (one file) or "dcp" (a folder)
  bool merge = false;     // hf of a LoRA run: the adapters merged into the base (without: refused)
  std::string out;        // folder for hf and dcp, file for pt
  std::string tokenizer;  // SentencePiece model; default: the model's origin, else <data.dir>/tokenizer.model
  std::string dtype;      // hf: float32|bfloat16|float16; default the origin's dtype, else bfloat16; peft: default float32
  std::string max_shard_size = "50GB";  // hf: the largest safetensors file ("100MB" = 1e8 bytes, "100MiB")
  int64_t rank = 0, world_size = 1;     // hf under `cadre run`: each rank writes its share of the files
  AgreeFn agree;
  TokenizerIds tokenizer_ids;           // bos/eos of a SentencePiece model (null: 1 and 2)
  BaseFor base_for;                     // --merge of a checkpoint that leaves its base out
};

// The adapter of the model a checkpoint's config describes (null: the model has none).
using AdapterFor = std::function<std::unique_ptr<StateDictAdapter>(const Config&)>;

// Checks inputs (ConfigError naming the file), then writes the export. Returns a summary line.
std::string checkpoint_export(const ExportOptions& options, const AdapterFor& adapter_for);

}  // namespace cadre
