// The cached forward: per-row norms, rotary and SwiGLU, batch-invariant matrices, and
// attention per (row, head) over the row's own slot, whose cache grows in blocks.
#include "models/llama/decode.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/batch_invariant_linear.h"
#include "models/llama/decoder_weights.h"

namespace cadre {
namespace {

// RMSNorm of each row of x [R, dim] into out, as the training forward computes it:
// x * rsqrt(mean(x^2) + eps), then times the weight.
void rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  const int64_t R = x.size(0), D = x.size(1);
  const float* w = weight.data_ptr<float>();
  at::parallel_for(0, R, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data_ptr<float>() + r * D;
      float* o = out.data_ptr<float>() + r * D;
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(xr[i]) * double(xr[i]);
      const float scale = 1.0f / std::sqrt(static_cast<float>(ss / double(D)) + static_cast<float>(eps));
      for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] * scale) * w[i];
    }
  });
}

// x * cos + rotate_half(x) * sin for one head vector (HF's rotate-half layout).
void rope_in_place(float* x, const float* cos, const float* sin, int64_t hd) {
  const int64_t half = hd / 2;
  float rotated[1024];
  for (int64_t i = 0; i < half; ++i) {
    rotated[i] = -x[i + half];
    rotated[i + half] = x[i];
  }
  for (int64_t i = 0; i < hd; ++i) x[i] = x[i] * cos[i] + rotated[i] * sin[i];
}

}  // namespace

LlamaDecoder::LlamaDecoder(const Llama& model, DecodeOptions options, const ParamSource* weights)
    : config_(model.config()), options_(options), adapters_(model.config(), options.weight_dtype) {
  const LlamaConfig& c = config_;
  if (options_.max_len <= 0) options_.max_len = c.max_seq_len;
  CADRE_CHECK(options_.slots >= 1, "decoder: slots must be >= 1");
  CADRE_CHECK(options_.max_len <= c.max_seq_len, "decoder: max_len ", options_.max_len, " exceeds model.max_seq_len ",
              c.max_seq_len);
  CADRE_CHECK(options_.weight_dtype == at::kFloat || options_.weight_dtype == at::kBFloat16,
              "decoder: weights must be float32 or bfloat16");
  head_dim_ = c.dim / c.n_heads;
  block_tokens_ = std::min(kCacheBlockTokens, options_.max_len);
  CADRE_CHECK(head_dim_ <= 1024, "decoder: head_dim ", head_dim_, " is above 1024");
  LlamaDecoderWeights w = llama_decoder_weights(model, weights, options_.weight_dtype, c10::Device(c10::kCPU));
  weight_bytes_ = w.bytes();
  embedding_ = w.embedding;
  norm_ = w.norm;
  head_ = w.head;
  rope_cos_ = model.rope_cos().contiguous();
  rope_sin_ = model.rope_sin().contiguous();
  for (auto& weights_of_layer : w.layers) layers_.push_back(std::move(weights_of_layer));
  lengths_.assign(static_cast<size_t>(options_.slots), 0);
  blocks_.resize(static_cast<size_t>(options_.slots));
}

void LlamaDecoder::reset(int64_t slot) {
  CADRE_CHECK(slot >= 0 && slot < options_.slots, "decoder: no slot ", slot);
  lengths_[static_cast<size_t>(slot)] = 0;
  auto& blocks = blocks_[static_cast<size_t>(slot)];
  blocks_held_ -= static_cast<int64_t>(blocks.size());
  blocks.clear();
}

int64_t LlamaDecoder::weight_bytes() const { return weight_bytes_; }

int64_t LlamaDecoder::cache_bytes_per_token() const {
  return 2 * config_.n_layers * config_.n_kv_heads * head_dim_ * static_cast<int64_t>(c10::elementSize(options_.weight_dtype));
}

void LlamaDecoder::grow_caches(const std::vector<int64_t>& lengths) {
  for (size_t slot = 0; slot < blocks_.size(); ++slot) {
    const int64_t needed = (lengths[slot] + block_tokens_ - 1) / block_tokens_;
    while (static_cast<int64_t>(blocks_[slot].size()) < needed) {
      // Not zeroed: attention reads only positions that were written.
      blocks_[slot].push_back(at::empty({config_.n_layers, 2, config_.n_kv_heads, block_tokens_, head_dim_},
                                        options_.weight_dtype));
      peak_blocks_held_ = std::max(peak_blocks_held_, ++blocks_held_);
    }
  }
}

int64_t LlamaDecoder::cache_offset(int64_t layer, int which, int64_t g, int64_t pos) const {
  return (((layer * 2 + which) * config_.n_kv_heads + g) * block_tokens_ + pos % block_tokens_) * head_dim_;
}

void LlamaDecoder::write_cache(int64_t slot, int64_t layer, int which, int64_t g, int64_t pos, const float* from) {
  const at::Tensor& block = blocks_[static_cast<size_t>(slot)][static_cast<size_t>(pos / block_tokens_)];
  const int64_t at = cache_offset(layer, which, g, pos);
  if (options_.weight_dtype == at::kFloat) {
    std::copy_n(from, head_dim_, block.data_ptr<float>() + at);
  } else {
    at::BFloat16* to = block.data_ptr<at::BFloat16>() + at;
    for (int64_t i = 0; i < head_dim_; ++i) to[i] = at::BFloat16(from[i]);  // round to nearest even
  }
}

namespace {

// `count` cached rows of head_dim floats starting at `at` in a block, as float32: the block's
// own memory, or bf16 rows widened (exactly) into `scratch`.
const float* float_rows(const at::Tensor& block, int64_t at, int64_t count, int64_t hd, std::vector<float>& scratch) {
  if (block.scalar_type() == at::kFloat) return block.data_ptr<float>() + at;
  const at::BFloat16* from = block.data_ptr<at::BFloat16>() + at;
  for (int64_t i = 0; i < count * hd; ++i) scratch[static_cast<size_t>(i)] = static_cast<float>(from[i]);
  return scratch.data();
}

}  // namespace

void LlamaDecoder::attention(int64_t layer, const std::vector<DecodeRow>& rows, const std::vector<int64_t>& positions,
                             const at::Tensor& qkv, at::Tensor& out) const {
  const int64_t R = static_cast<int64_t>(rows.size()), H = config_.n_heads, KV = config_.n_kv_heads, hd = head_dim_;
  const int64_t rep = H / KV, width = qkv.size(1), B = block_tokens_;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  int64_t longest = 0;
  for (int64_t p : positions) longest = std::max(longest, p + 1);
  // Small pieces of work stay on one thread: a task costs ~4 * positions * hd flops.
  const int64_t grain = std::max<int64_t>(1, 65536 / (4 * longest * hd));
  at::parallel_for(0, R * H, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> q(static_cast<size_t>(hd)), p(static_cast<size_t>(longest)), scratch(static_cast<size_t>(B * hd));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t r = task / H, h = task % H, g = h / rep, n = positions[static_cast<size_t>(r)] + 1;
      const auto& blocks = blocks_[static_cast<size_t>(rows[static_cast<size_t>(r)].slot)];
      const float* qr = qkv.data_ptr<float>() + r * width + h * hd;
      for (int64_t i = 0; i < hd; ++i) q[i] = qr[i] * scale;  // q scaled first, as in training
      // Each position's score is its own dot product, so splitting them by block changes no bit.
      for (int64_t first = 0; first < n; first += B) {
        const int64_t count = std::min(B, n - first);
        const at::Tensor& block = blocks[static_cast<size_t>(first / B)];
        batch_invariant_dots(q.data(), float_rows(block, cache_offset(layer, 0, g, 0), count, hd, scratch), count, hd,
                             p.data() + first);
      }
      const float top = *std::max_element(p.begin(), p.begin() + n);
      float sum = 0;
      for (int64_t t = 0; t < n; ++t) sum += (p[t] = std::exp(p[t] - top));
      float* o = out.data_ptr<float>() + r * H * hd + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t first = 0; first < n; first += B) {
        const int64_t count = std::min(B, n - first);
        const at::Tensor& block = blocks[static_cast<size_t>(first / B)];
        const float* V = float_rows(block, cache_offset(layer, 1, g, 0), count, hd, scratch);
        for (int64_t t = 0; t < count; ++t) {
          const float w = p[first + t] / sum;
          const float* v = V + t * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] += w * v[i];
        }
      }
    }
  });
}

at::Tensor LlamaDecoder::forward(const std::vector<DecodeRow>& rows) {
  const LlamaConfig& c = config_;
  const int64_t R = static_cast<int64_t>(rows.size()), D = c.dim, H = c.n_heads, KV = c.n_kv_heads, hd = head_dim_;
  const int64_t F = layers_.empty() ? 0 : layers_[0].w2.size(1), L = options_.max_len;
  const int64_t n_layers = static_cast<int64_t>(layers_.size());
  if (R == 0) return at::empty({0, c.vocab_size}, at::kFloat);
  // Positions: each slot's rows continue its cache in order.
  std::vector<int64_t> positions(static_cast<size_t>(R)), next = lengths_;
  for (int64_t r = 0; r < R; ++r) {
    const DecodeRow& row = rows[static_cast<size_t>(r)];
    CADRE_CHECK(row.slot >= 0 && row.slot < options_.slots, "decoder: no slot ", row.slot);
    CADRE_CHECK(row.token >= 0 && row.token < c.vocab_size, "decoder: token ", row.token, " is outside the vocabulary of ",
                c.vocab_size);
    int64_t& len = next[static_cast<size_t>(row.slot)];
    CADRE_CHECK(len < L, "decoder: slot ", row.slot, " is full (", L, " positions)");
    positions[static_cast<size_t>(r)] = len++;
  }
  grow_caches(next);
  const bool with_adapters = adapters_.used_by(rows);
  at::Tensor h = at::empty({R, D}, at::kFloat), x = at::empty({R, D}, at::kFloat);
  for (int64_t r = 0; r < R; ++r) h[r].copy_(embedding_[rows[static_cast<size_t>(r)].token]);  // widened when bf16
  const int64_t width = (H + 2 * KV) * hd;
  at::Tensor qkv = at::empty({R, width}, at::kFloat), att = at::empty({R, H * hd}, at::kFloat);
  at::Tensor proj = at::empty({R, D}, at::kFloat), gate_up = at::empty({R, 2 * F}, at::kFloat);
  at::Tensor act = at::empty({R, F}, at::kFloat);
  for (int64_t l = 0; l < n_layers; ++l) {
    const Layer& layer = layers_[static_cast<size_t>(l)];
    rms_norm_rows(h, layer.attention_norm, c.norm_eps, x);
    batch_invariant_linear_out(x, layer.wqkv, qkv);
    if (with_adapters)
      for (auto p : {LlamaDecodeAdapters::Q, LlamaDecodeAdapters::K, LlamaDecodeAdapters::V}) adapters_.apply(l, p, rows, x, qkv);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t pos = positions[static_cast<size_t>(r)], slot = rows[static_cast<size_t>(r)].slot;
      const float* cos = rope_cos_.data_ptr<float>() + pos * hd;
      const float* sin = rope_sin_.data_ptr<float>() + pos * hd;
      float* row = qkv.data_ptr<float>() + r * width;
      for (int64_t head = 0; head < H + KV; ++head) rope_in_place(row + head * hd, cos, sin, hd);
      for (int64_t g = 0; g < KV; ++g) {
        write_cache(slot, l, 0, g, pos, row + (H + g) * hd);
        write_cache(slot, l, 1, g, pos, row + (H + KV + g) * hd);
      }
    }
    attention(l, rows, positions, qkv, att);
    batch_invariant_linear_out(att, layer.wo, proj);
    if (with_adapters) adapters_.apply(l, LlamaDecodeAdapters::O, rows, att, proj);
    h.add_(proj);
    rms_norm_rows(h, layer.ffn_norm, c.norm_eps, x);
    batch_invariant_linear_out(x, layer.w13, gate_up);
    if (with_adapters)
      for (auto p : {LlamaDecodeAdapters::Gate, LlamaDecodeAdapters::Up}) adapters_.apply(l, p, rows, x, gate_up);
    at::parallel_for(0, R, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* g = gate_up.data_ptr<float>() + r * 2 * F;
        float* a = act.data_ptr<float>() + r * F;
        for (int64_t i = 0; i < F; ++i) a[i] = (g[i] / (1.0f + std::exp(-g[i]))) * g[F + i];
      }
    });
    batch_invariant_linear_out(act, layer.w2, proj);
    if (with_adapters) adapters_.apply(l, LlamaDecodeAdapters::Down, rows, act, proj);
    h.add_(proj);
  }
  std::vector<int64_t> wanted;
  for (int64_t r = 0; r < R; ++r)
    if (rows[static_cast<size_t>(r)].logits) wanted.push_back(r);
  lengths_ = next;
  if (wanted.empty()) return at::empty({0, c.vocab_size}, at::kFloat);
  at::Tensor last = at::empty({static_cast<int64_t>(wanted.size()), D}, at::kFloat);
  for (size_t i = 0; i < wanted.size(); ++i)
    std::copy_n(h.data_ptr<float>() + wanted[i] * D, D, last.data_ptr<float>() + static_cast<int64_t>(i) * D);
  at::Tensor normed = at::empty_like(last);
  rms_norm_rows(last, norm_, c.norm_eps, normed);
  return batch_invariant_linear(normed, head_);
}

}  // namespace cadre
