// Export of a trained checkpoint to the formats other tools load: a Hugging Face folder (the
// model's config.json, model.safetensors with the format's tensor names, tokenizer files) and
// a .pt file that Python's torch.load reads. The model supplies the names through its
// StateDictAdapter; a model without one exports its own names to .pt only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ckpt/state_dict_adapter.h"
#include "core/config.h"

namespace cadre {

struct ExportOptions {
  std::string checkpoint; // a checkpoint, or a run/checkpoint directory (newest complete one)
  std::string format;     // "hf" (a folder) or "pt" (one file)
  std::string out;        // folder for hf, file for pt
  std::string tokenizer;  // SentencePiece model; default: <data.dir>/tokenizer.model if present
};

// The adapter of the model a checkpoint's config describes (null: the model has none).
using AdapterFor = std::function<std::unique_ptr<StateDictAdapter>(const Config&)>;

// Checks inputs (ConfigError naming the file), then writes the export. Returns a summary line.
std::string checkpoint_export(const ExportOptions& options, const AdapterFor& adapter_for);

}  // namespace cadre
