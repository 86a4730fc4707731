// KV-cache decoding for Llama: a forward over new tokens only, each attending to its
// sequence's cached keys and values. Several sequences share each call (continuous batching):
// a call takes any mix of prompt tokens and generated tokens from any slots. Every row is
// computed with shapes that do not depend on the other rows (batch_invariant_linear for the
// matrices, attention per row and head, norms per row), so a sequence's logits are the same
// bits alone or batched, and whether its prompt came in one call or token by token. The
// training forward (models/llama/model.h) is untouched: with float32 weights these logits
// equal its logits to float32 rounding (tested to 1e-5).
// The KV cache is kept in the weights' dtype and grows with each slot in blocks of
// kCacheBlockTokens positions (fewer when the context is shorter; all layers' keys and values
// in one allocation), freed when the slot is reset: memory follows the tokens held, not
// slots x context.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/param_source.h"
#include "models/llama/decode_adapters.h"
#include "models/llama/decoder_weights.h"
#include "models/llama/model.h"
#include "models/model.h"

namespace cadre {

class LlamaDecoder : public Decoder {
 public:
  // Copies the weights it needs (packed: q, k and v in one matrix, gate and up in another), from
  // the model's parameters, or from `weights` when given (the model may then be deferred).
  LlamaDecoder(const Llama& model, DecodeOptions options, const ParamSource* weights = nullptr);

  at::Tensor forward(const std::vector<DecodeRow>& rows) override;
  void reset(int64_t slot) override;
  int64_t length(int64_t slot) const override { return lengths_.at(static_cast<size_t>(slot)); }
  int64_t slots() const override { return options_.slots; }
  int64_t max_len() const override { return options_.max_len; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  const LlamaConfig& config() const { return config_; }
  int64_t weight_bytes() const override;
  int64_t cache_bytes() const override { return blocks_held_ * block_bytes(); }
  int64_t cache_peak_bytes() const override { return peak_blocks_held_ * block_bytes(); }
  int64_t cache_bytes_per_token() const override;
  int64_t cache_block_tokens() const override { return block_tokens_; }
  int64_t add_adapter(const LoraWeights& adapter) override { return adapters_.add(adapter); }

  static constexpr int64_t kCacheBlockTokens = 256;

 private:
  using Layer = LlamaDecoderWeights::Layer;
  int64_t block_bytes() const { return block_tokens_ * cache_bytes_per_token(); }
  void grow_caches(const std::vector<int64_t>& lengths);  // blocks for every position up to lengths[slot]
  // Where position `pos` of `slot` keeps layer `layer`'s key (which 0) or value (1) of kv head g.
  int64_t cache_offset(int64_t layer, int which, int64_t g, int64_t pos) const;
  void write_cache(int64_t slot, int64_t layer, int which, int64_t g, int64_t pos, const float* from);
  void attention(int64_t layer, const std::vector<DecodeRow>& rows, const std::vector<int64_t>& positions,
                 const at::Tensor& qkv, at::Tensor& out) const;

  LlamaConfig config_;
  DecodeOptions options_;
  int64_t head_dim_ = 0, weight_bytes_ = 0, block_tokens_ = 0;
  at::Tensor embedding_, norm_, head_;  // embedding and head weight_dtype (one tensor when tied)
  at::Tensor rope_cos_, rope_sin_;      // [max_seq_len, head_dim] float32
  std::vector<Layer> layers_;
  LlamaDecodeAdapters adapters_;  // LoRA adapters rows may name (DecodeRow::adapter)
  std::vector<int64_t> lengths_;
  // Per slot, its cache blocks: [n_layers, 2 (key, value), n_kv_heads, block_tokens_, head_dim]
  // each, in the weight dtype.
  std::vector<std::vector<at::Tensor>> blocks_;
  int64_t blocks_held_ = 0, peak_blocks_held_ = 0;
};

}  // namespace cadre
