// A language model for inference from what a user points at: a Cadre checkpoint (or a run or
// checkpoint directory: its newest complete checkpoint) or a Hugging Face folder, and the
// tokenizer that goes with it. Which model it is comes from the registry
// (models/registry.h); generation sees it only through models/model.h's CausalLm.
// Opened, the model has shapes and no storage: a decoder reads its weights from the checkpoint
// or folder in its own dtype (bfloat16 straight from bfloat16 files), so serving a model holds
// its weights once in the compute dtype, never a float32 copy beside them.
#pragma once

#include <memory>
#include <string>

#include "core/config.h"
#include "core/param_source.h"
#include "models/model.h"

namespace cadre {

struct InferenceModel {
  std::unique_ptr<Model> model;            // eval mode; model->causal_lm() is set; no storage unless loaded
  Config config;                           // the model's (its model section resolved)
  std::shared_ptr<const ParamSource> weights;  // the trained values, read where they are stored
  std::string stored_dtype;                // "bfloat16" or "float32": what the weights came in (the decode default)
  std::string tokenizer;                   // the tokenizer.model or tokenizer.json found ("" when none)
  std::string source;                      // "checkpoint <path>" or "Hugging Face folder <path>"
  std::string name;                        // a short id for the API ("runs/small" -> "small")

  const CausalLm& lm() const { return *model->causal_lm(); }
  // A decoder whose weights are read from `weights` in options.weight_dtype.
  std::unique_ptr<Decoder> decoder(const DecodeOptions& options) const { return lm().decoder(options, weights.get()); }
};

// Opens the model: its config and the headers of its files are read and checked against each
// other, no weight yet. `tokenizer` overrides where the tokenizer comes from; otherwise the
// folder's or checkpoint's own tokenizer.model or tokenizer.json (its origin's, ckpt/model_origin.h), or the one
// beside the checkpoint's training data. ConfigError naming the path for anything missing or not
// a language model. `need_tokenizer` false (benchmarks feeding token ids) accepts none.
// stored_dtype: a folder's float dtype (bfloat16 for BF16; float32 for F32 and F16, which
// bfloat16 would round), a checkpoint's origin's dtype when it has one, else float32.
InferenceModel inference_model_open(const std::string& path, const std::string& tokenizer = "", bool need_tokenizer = true);

// As inference_model_open, with the module's parameters allocated and filled (float32): for
// code that runs the training forward on it (tests, parity checks).
InferenceModel inference_model_load(const std::string& path, const std::string& tokenizer = "", bool need_tokenizer = true);

}  // namespace cadre
