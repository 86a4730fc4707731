// Llama <-> Hugging Face LlamaForCausalLM: tensor names (Cadre's rotary layout is already HF's
// rotate-half, so no q/k permutation), config.json with transformers' LlamaConfig field names,
// and the SentencePiece tokenizer with its tokenizer_config.json.
#pragma once

#include <string>

#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "models/llama/config.h"

namespace cadre {

// Cadre (Meta-style) parameter name -> HF name; Error for a name Llama does not have.
std::string hf_tensor_name(const std::string& cadre_name);

// The `model:` section (arch llama) that a transformers LlamaConfig (config.json's text)
// describes; ConfigError naming `source` and the field for a missing or wrong field, or for a
// feature Cadre's Llama lacks (a RoPE scaling other than linear and llama3, attention or MLP
// biases, another activation). RoPE's settings are read in either spelling (models/llama/hf_rope.h).
ModelSection llama_section_from_hf(const std::string& config_json, const std::string& source);

class LlamaHfAdapter : public StateDictAdapter {
 public:
  explicit LlamaHfAdapter(LlamaConfig config) : config_(config) {}
  std::string external_name(const std::string& name) const override;
  std::string internal_name(const std::string& external) const override;
  std::string config_json() const override;
  void write_extras(const std::string& dir, const std::string& tokenizer) const override;

 private:
  LlamaConfig config_;
};

}  // namespace cadre
