// A language model for inference from what a user points at: a Cadre checkpoint (or a run or
// checkpoint directory: its newest complete checkpoint) or a Hugging Face folder, and the
// SentencePiece tokenizer that goes with it. Which model it is comes from the registry
// (models/registry.h); generation sees it only through models/model.h's CausalLm.
#pragma once

#include <memory>
#include <string>

#include "models/model.h"

namespace cadre {

struct InferenceModel {
  std::unique_ptr<Model> model;  // trained weights, float32, eval mode; model->causal_lm() is set
  std::string tokenizer;         // path of the tokenizer.model found ("" when none)
  std::string source;            // "checkpoint <path>" or "Hugging Face folder <path>"
  std::string name;              // a short id for the API ("runs/small" -> "small")

  const CausalLm& lm() const { return *model->causal_lm(); }
};

// Loads the weights (float32, in eval mode). `tokenizer` overrides where the tokenizer comes
// from; otherwise the folder's or checkpoint's own tokenizer.model, or the one beside the
// checkpoint's training data. ConfigError naming the path for anything missing or not a
// language model. `need_tokenizer` false (benchmarks feeding token ids) accepts a model without one.
InferenceModel inference_model_load(const std::string& path, const std::string& tokenizer = "", bool need_tokenizer = true);

}  // namespace cadre
