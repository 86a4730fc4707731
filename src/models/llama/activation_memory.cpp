// Llama's activations, counted from what model.cpp's forward leaves autograd, per token, in
// elements of the compute dtype, with H heads, KV kv-heads, F hidden units and V vocabulary
// entries per tensor-parallel rank:
//   a block keeps  2D  its input and attention_norm's output (read by wq, wk, wv)
//                  4Hh q after RoPE, k and v repeated to H heads, the heads' output (read by wo)
//                  HT  the causal softmax's probabilities, T keys per query (none where the
//                      GPU's fused attention runs: it keeps H log-sum-exps in float32)
//                  2D  the residual sum and ffn_norm's output (read by w1, w3)
//                  3F  w1's and w3's outputs (read by SwiGLU) and SwiGLU's (read by w2);
//                      4F where SwiGLU is not the fused CPU kernel (swiglu_fused_on_cpu):
//                      silu(w1's) too
//   the head keeps D (the final norm's output) and V (the logits, read by the fused cross
//   entropy); its backward adds V (the logits' gradient).
// With activation checkpointing a block keeps only its input (D) until the backward recomputes
// it, so one block's set is alive at a time. A pipeline stage holds only its blocks (the head
// on the last stage), and what they keep for each micro-batch in flight (ActivationShape). The
// backward of a block makes gradients about the size of what it keeps, counted once more as the
// working set (once, however many micro-batches are in flight). And the backward makes each
// weight's gradient as a new tensor before adding it to the unit's gradient buffer: the largest
// is the embedding's (or the head's), V x D, the whole table's gradient however few tokens
// the batch has (the embedding's backward is dense): at a 128256-token vocabulary that tensor,
// not the tokens, is most of the working set.
// Frozen parts (train.freeze): a frozen projection's backward needs its weight, not its input,
// so a block whose projections are all frozen keeps neither norm's output, nor the heads'
// output, nor SwiGLU's (D + 3Hh + probs + D + 2F, or 3F unfused); blocks before the first that
// trains, after a frozen embedding, keep nothing at all (no gradient flows into them); a
// frozen head does not keep its input, and with both the embedding and the head frozen no
// V x D weight gradient is made.
#include "models/llama/activation_memory.h"

#include <algorithm>

#include "models/fused_swiglu.h"

namespace cadre {

int64_t llama_activation_bytes(const LlamaConfig& c, const ActivationShape& s, const LlamaFrozenParts& frozen) {
  const int64_t tp = s.tp_size, D = c.dim, hd = c.dim / c.n_heads;
  const int64_t H = c.n_heads / tp, F = llama_ffn_dim(c) / tp, V = c.vocab_size / tp, T = s.seq_len;
  const int64_t probs = llama_uses_sdpa(c, s.cuda) ? (H * 4 + s.compute_bytes - 1) / s.compute_bytes : H * T;
  const bool fused_swiglu = !s.cuda && swiglu_fused_on_cpu(s.compute_bytes == 4 ? at::kFloat : at::kBFloat16);
  const int64_t block = 2 * D + 4 * H * hd + probs + 2 * D + (fused_swiglu ? 3 : 4) * F;
  const int64_t frozen_block = D + 3 * H * hd + probs + D + (fused_swiglu ? 2 : 3) * F;
  int64_t blocks_kept = 0, largest = 0;
  bool gradient_flows = !frozen.embedding;
  const int64_t held = frozen.blocks_held < 0 ? c.n_layers : frozen.blocks_held;
  for (int64_t i = 0; i < held; ++i) {
    const bool block_frozen = size_t(i) < frozen.blocks.size() && frozen.blocks[size_t(i)];
    if (block_frozen && !gradient_flows) continue;
    gradient_flows = true;
    const int64_t kept = block_frozen ? frozen_block : block;
    blocks_kept += s.checkpointing ? D : kept;
    largest = std::max(largest, kept);
  }
  const int64_t recomputed = s.checkpointing ? largest : 0;  // the one block recomputed at a time
  const int64_t head_kept = frozen.head_held ? (frozen.head ? 0 : D) + V : 0;
  const int64_t head_gradient = frozen.head_held ? V : 0;
  const int64_t weight_gradient = frozen.embedding && frozen.head ? 0 : V * D;
  const int64_t kept = D /* the embedding's output, or the previous stage's */ + blocks_kept + head_kept;
  const int64_t working = recomputed + largest /* backward working set */ + head_gradient;
  return ((s.in_flight * kept + working) * s.batch * T + weight_gradient) * s.compute_bytes;
}

}  // namespace cadre
