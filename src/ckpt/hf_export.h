// Export of a trained Llama to the formats other tools load: a Hugging Face folder
// (config.json with HF field names, model.safetensors with HF tensor names, the SentencePiece
// tokenizer) and a .pt file of HF-named tensors that Python's torch.load reads.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "core/config.h"

namespace cadre {

// Cadre (Meta-style) parameter name -> Hugging Face LlamaForCausalLM name. Cadre's rotary
// embedding already uses HF's rotate-half layout, so no q/k permutation is needed.
std::string hf_tensor_name(const std::string& cadre_name);

// HF state dict from Cadre parameters (names without the checkpoint's "model." prefix).
std::map<std::string, at::Tensor> hf_state_dict(const std::map<std::string, at::Tensor>& params,
                                                const ModelConfig& model);

// config.json contents for transformers' LlamaConfig.
std::string hf_config_json(const ModelConfig& model, int64_t bos_id, int64_t eos_id);

struct ExportOptions {
  std::string checkpoint; // a checkpoint, or a run/checkpoint directory (newest complete one)
  std::string format;     // "hf" (a folder) or "pt" (one file)
  std::string out;        // folder for hf, file for pt
  std::string tokenizer;  // SentencePiece model; default: <data.dir>/tokenizer.model if present
};

// Checks inputs (ConfigError naming the file), then writes the export. Returns a summary line.
std::string checkpoint_export(const ExportOptions& options);

}  // namespace cadre
