// A LoRA run's checkpoint (lora.rank > 0: adapter factors beside a frozen base, core/lora_naming.h)
// exported the two ways people ship one: the adapters alone as a PEFT folder
// (adapter_config.json + adapter_model.safetensors, which peft's PeftModel.from_pretrained loads
// onto the transformers model of the base, and vLLM serves), or merged into the base,
// W + alpha / rank * B A, as a plain Hugging Face folder (ckpt/hf_export.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/state_dict_adapter.h"
#include "core/config.h"

namespace cadre {

// One adapted layer's checkpoint tensors.
struct LoraLayerTensors {
  std::string layer;          // the model's name for it ("layers.0.attention.wq")
  std::string weight, a, b;   // "model.<layer>.weight", ".lora_a", ".lora_b"
};

struct LoraCheckpoint {
  LoraConfig config;          // the run's lora section
  double scale = 0;           // alpha / rank
  std::vector<LoraLayerTensors> layers;
  bool empty() const { return layers.empty(); }
};

// An adapter factor's name in Hugging Face terms, as PEFT names it inside a model: the adapted
// layer's module, then lora_A.weight or lora_B.weight ("layers.0.attention.wq.lora_a" ->
// "model.layers.0.self_attn.q_proj.lora_A.weight").
std::string lora_external_name(const StateDictAdapter& adapter, const std::string& factor);

// The adapters `reader`'s checkpoint holds (none: empty); CheckpointError when a factor's shapes
// do not fit its layer or the run's lora.rank.
LoraCheckpoint lora_checkpoint(const CheckpointReader& reader, const Config& config);

// Writes `out`/adapter_config.json and adapter_model.safetensors (the factors in `dtype`, under
// PEFT's names: base_model.model.<the layer's Hugging Face name>.lora_A.weight). Returns a
// summary line.
std::string peft_export(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
                        const LoraCheckpoint& lora, const std::string& out, at::ScalarType dtype);

}  // namespace cadre
