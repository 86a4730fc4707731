// The weights a Llama decoder keeps, packed for decoding (q, k and v in one matrix, gate and up
// in another), each read once from where the model's values are: the module's own parameters,
// or a ParamSource (a checkpoint or a Hugging Face folder read in place and converted as it is
// read, in chunks). From a source, loading holds the weights in the decode dtype and one 16 MiB
// chunk, never a float32 copy of the model; the module then needs no storage (built deferred).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "core/param_source.h"
#include "models/llama/model.h"

namespace cadre {

struct LlamaDecoderWeights {
  struct Layer {
    at::Tensor attention_norm, ffn_norm;  // float32 [dim]
    at::Tensor wqkv, wo, w13, w2;         // the weight dtype
  };
  at::Tensor embedding;  // the weight dtype [vocab, dim]
  at::Tensor norm;       // float32 [dim]
  at::Tensor head;       // the weight dtype [vocab, dim]; the embedding itself when tied
  std::vector<Layer> layers;

  int64_t bytes() const;  // every tensor once (a tied head is the embedding)
};

// `source` null: the module's parameters (which must have storage). Tensors end on `device`.
LlamaDecoderWeights llama_decoder_weights(const Llama& model, const ParamSource* source, at::ScalarType dtype,
                                          const c10::Device& device);

}  // namespace cadre
