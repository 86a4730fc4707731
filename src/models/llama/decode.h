// KV-cache decoding for Llama: a forward over new tokens only, each attending to its
// sequence's cached keys and values. Several sequences share each call (continuous batching):
// a call takes any mix of prompt tokens and generated tokens from any slots. Every row is
// computed with shapes that do not depend on the other rows (batch_invariant_linear for the
// matrices, attention per row and head, norms per row), so a sequence's logits are the same
// bits alone or batched, and whether its prompt came in one call or token by token. The
// training forward (models/llama/model.h) is untouched: with float32 weights these logits
// equal its logits to float32 rounding (tested to 1e-5).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "models/llama/model.h"

namespace cadre {

struct DecodeOptions {
  int64_t slots = 1;    // sequences with a cache of their own
  int64_t max_len = 0;  // cached positions per slot; 0: the model's max_seq_len
  // float32 reproduces the training forward; bfloat16 stores the matrices in half the bytes
  // (decode reads every weight once per step, so it is faster where memory bandwidth limits).
  at::ScalarType weight_dtype = at::kFloat;
};

// One new token of one sequence: it goes to position length(slot) (plus the rows of that
// slot earlier in the same call).
struct DecodeRow {
  int64_t slot = 0;
  int64_t token = 0;
  bool logits = false;  // return this row's next-token logits
};

class LlamaDecoder {
 public:
  // Copies the weights it needs (packed: q, k and v in one matrix, gate and up in another).
  LlamaDecoder(const Llama& model, DecodeOptions options);

  // Appends the rows to their slots' caches and returns the logits of the rows that asked
  // for them, in row order: [count, vocab] float32. Error when a slot would exceed max_len.
  at::Tensor forward(const std::vector<DecodeRow>& rows);

  void reset(int64_t slot);  // empties the slot's cache
  int64_t length(int64_t slot) const { return lengths_.at(static_cast<size_t>(slot)); }
  int64_t slots() const { return options_.slots; }
  int64_t max_len() const { return options_.max_len; }
  int64_t vocab_size() const { return config_.vocab_size; }
  const LlamaConfig& config() const { return config_; }
  // Bytes of weights one decode step reads, and of the caches.
  int64_t weight_bytes() const;
  int64_t cache_bytes() const;

 private:
  struct Layer {
    at::Tensor attention_norm, ffn_norm;  // float32 [dim]
    at::Tensor wqkv, wo, w13, w2;         // weight_dtype
    at::Tensor k_cache, v_cache;          // float32 [slots, n_kv_heads, max_len, head_dim]
  };
  void attention(const Layer& layer, const std::vector<DecodeRow>& rows, const std::vector<int64_t>& positions,
                 const at::Tensor& qkv, at::Tensor& out) const;

  LlamaConfig config_;
  DecodeOptions options_;
  int64_t head_dim_ = 0;
  at::Tensor embedding_, norm_, head_;  // embedding float32; head weight_dtype
  at::Tensor rope_cos_, rope_sin_;      // [max_seq_len, head_dim] float32
  std::vector<Layer> layers_;
  std::vector<int64_t> lengths_;
};

}  // namespace cadre
