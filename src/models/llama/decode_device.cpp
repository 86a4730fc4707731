// The cached forward as tensor operations on the decoder's device: norms, rotary, SwiGLU and
// the matrices over all rows at once, attention per slot over that slot's cache.
#include "models/llama/decode_device.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace cadre {
namespace {

using at::indexing::Slice;

at::Tensor packed_on(const std::vector<at::Tensor>& parts, at::ScalarType dtype, const c10::Device& device) {
  std::vector<at::Tensor> detached;
  for (const auto& p : parts) detached.push_back(p.detach().to(at::kFloat));
  return at::cat(detached, 0).to(device, dtype).contiguous();
}

at::Tensor vector_on(const at::Tensor& t, const c10::Device& device) {
  return t.detach().to(device, at::kFloat).contiguous().clone();
}

at::Tensor long_tensor(const std::vector<int64_t>& values, const c10::Device& device) {
  return at::tensor(values, at::kLong).to(device);
}

}  // namespace

LlamaDeviceDecoder::LlamaDeviceDecoder(const Llama& model, DecodeOptions options)
    : config_(model.config()), options_(options) {
  const LlamaConfig& c = config_;
  const c10::Device device = options_.device;
  if (options_.max_len <= 0) options_.max_len = c.max_seq_len;
  CADRE_CHECK(options_.slots >= 1, "decoder: slots must be >= 1");
  CADRE_CHECK(options_.max_len <= c.max_seq_len, "decoder: max_len ", options_.max_len, " exceeds model.max_seq_len ",
              c.max_seq_len);
  CADRE_CHECK(options_.weight_dtype == at::kFloat || options_.weight_dtype == at::kBFloat16,
              "decoder: weights must be float32 or bfloat16");
  head_dim_ = c.dim / c.n_heads;
  c10::NoGradGuard no_grad;
  const at::ScalarType wt = options_.weight_dtype;
  embedding_ = vector_on(model.tok_embeddings->weight, device);
  norm_ = vector_on(model.norm->weight, device);
  head_ = model.output ? packed_on({model.output->weight}, wt, device) : embedding_.to(wt).contiguous();
  rope_cos_ = model.rope_cos().to(device).contiguous();
  rope_sin_ = model.rope_sin().to(device).contiguous();
  for (const auto& block : model.layers->blocks) {
    Layer l;
    l.attention_norm = vector_on(block->attention_norm->weight, device);
    l.ffn_norm = vector_on(block->ffn_norm->weight, device);
    const auto& a = *block->attention;
    l.wqkv = packed_on({a.wq->weight, a.wk->weight, a.wv->weight}, wt, device);
    l.wo = packed_on({a.wo->weight}, wt, device);
    const auto& f = *block->feed_forward;
    l.w13 = packed_on({f.w1->weight, f.w3->weight}, wt, device);
    l.w2 = packed_on({f.w2->weight}, wt, device);
    l.k_cache = at::zeros({options_.slots, c.n_kv_heads, options_.max_len, head_dim_},
                          at::TensorOptions().dtype(at::kFloat).device(device));
    l.v_cache = at::zeros_like(l.k_cache);
    layers_.push_back(std::move(l));
  }
  lengths_.assign(static_cast<size_t>(options_.slots), 0);
}

void LlamaDeviceDecoder::reset(int64_t slot) {
  CADRE_CHECK(slot >= 0 && slot < options_.slots, "decoder: no slot ", slot);
  lengths_[static_cast<size_t>(slot)] = 0;
}

int64_t LlamaDeviceDecoder::weight_bytes() const {
  int64_t bytes = head_.nbytes();
  for (const auto& l : layers_) bytes += l.wqkv.nbytes() + l.wo.nbytes() + l.w13.nbytes() + l.w2.nbytes();
  return bytes;
}

int64_t LlamaDeviceDecoder::cache_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_) bytes += l.k_cache.nbytes() + l.v_cache.nbytes();
  return bytes;
}

// x [R, in] float32 times weight [out, in] in the weights' dtype (bf16 tensor cores on a GPU),
// back to float32.
at::Tensor LlamaDeviceDecoder::linear(const at::Tensor& x, const at::Tensor& weight) const {
  return at::matmul(x.to(weight.scalar_type()), weight.t()).to(at::kFloat);
}

// As the training forward: x * rsqrt(mean(x^2) + eps), then times the weight.
at::Tensor LlamaDeviceDecoder::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + config_.norm_eps) * weight;
}

// x [R, heads, hd]; cos, sin [R, 1, hd]: HF's rotate-half layout.
at::Tensor LlamaDeviceDecoder::rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const int64_t half = head_dim_ / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// q [R, H, hd] (rotated). Rows of one slot attend together to that slot's cache, each up to its
// own position (the rows later in the same call are masked out).
at::Tensor LlamaDeviceDecoder::attention(const Layer& layer, const std::vector<DecodeRow>& rows,
                                         const std::vector<int64_t>& positions, const at::Tensor& q) const {
  const int64_t H = config_.n_heads, KV = config_.n_kv_heads, hd = head_dim_;
  const c10::Device device = options_.device;
  std::map<int64_t, std::vector<int64_t>> rows_of_slot;
  for (size_t r = 0; r < rows.size(); ++r) rows_of_slot[rows[r].slot].push_back(static_cast<int64_t>(r));
  at::Tensor out = at::empty({static_cast<int64_t>(rows.size()), H, hd}, q.options());
  const double scale = 1.0 / std::sqrt(double(hd));
  for (const auto& [slot, members] : rows_of_slot) {
    std::vector<int64_t> pos;
    for (int64_t r : members) pos.push_back(positions[static_cast<size_t>(r)]);
    const int64_t n = *std::max_element(pos.begin(), pos.end()) + 1;
    const at::Tensor index = long_tensor(members, device);
    const at::Tensor qs = q.index_select(0, index).transpose(0, 1) * scale;  // [H, m, hd], scaled first as in training
    at::Tensor k = layer.k_cache[slot].narrow(1, 0, n), v = layer.v_cache[slot].narrow(1, 0, n);  // [KV, n, hd]
    k = k.repeat_interleave(H / KV, 0);
    v = v.repeat_interleave(H / KV, 0);
    at::Tensor scores = at::matmul(qs, k.transpose(1, 2));  // [H, m, n]
    const at::Tensor future = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0) >
                              long_tensor(pos, device).unsqueeze(1);  // [m, n]
    scores = scores.masked_fill(future.unsqueeze(0), -INFINITY);
    out.index_copy_(0, index, at::matmul(at::softmax(scores, -1), v).transpose(0, 1));
  }
  return out;
}

at::Tensor LlamaDeviceDecoder::forward(const std::vector<DecodeRow>& rows) {
  const LlamaConfig& c = config_;
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.n_heads, KV = c.n_kv_heads, hd = head_dim_;
  const int64_t L = options_.max_len;
  const c10::Device device = options_.device;
  if (R == 0) return at::empty({0, c.vocab_size}, at::kFloat);
  c10::NoGradGuard no_grad;
  std::vector<int64_t> positions(static_cast<size_t>(R)), slots(static_cast<size_t>(R)), tokens(static_cast<size_t>(R));
  std::vector<int64_t> next = lengths_, wanted;
  for (int64_t r = 0; r < R; ++r) {
    const DecodeRow& row = rows[static_cast<size_t>(r)];
    CADRE_CHECK(row.slot >= 0 && row.slot < options_.slots, "decoder: no slot ", row.slot);
    CADRE_CHECK(row.token >= 0 && row.token < c.vocab_size, "decoder: token ", row.token, " is outside the vocabulary of ",
                c.vocab_size);
    int64_t& len = next[static_cast<size_t>(row.slot)];
    CADRE_CHECK(len < L, "decoder: slot ", row.slot, " is full (", L, " positions)");
    positions[static_cast<size_t>(r)] = len++;
    slots[static_cast<size_t>(r)] = row.slot;
    tokens[static_cast<size_t>(r)] = row.token;
    if (row.logits) wanted.push_back(r);
  }
  const at::Tensor pos_t = long_tensor(positions, device), slot_t = long_tensor(slots, device);
  const at::Tensor cos = rope_cos_.index_select(0, pos_t).unsqueeze(1), sin = rope_sin_.index_select(0, pos_t).unsqueeze(1);
  at::Tensor h = embedding_.index_select(0, long_tensor(tokens, device));  // [R, D]
  for (Layer& layer : layers_) {
    const at::Tensor qkv = linear(rms_norm(h, layer.attention_norm), layer.wqkv);
    const at::Tensor q = rope(qkv.narrow(1, 0, H * hd).view({R, H, hd}), cos, sin);
    const at::Tensor k = rope(qkv.narrow(1, H * hd, KV * hd).view({R, KV, hd}), cos, sin);
    const at::Tensor v = qkv.narrow(1, (H + KV) * hd, KV * hd).view({R, KV, hd});
    // Every row's key and value go in first, so later rows of a slot see earlier ones.
    layer.k_cache.index_put_({slot_t, Slice(), pos_t}, k);
    layer.v_cache.index_put_({slot_t, Slice(), pos_t}, v);
    h = h + linear(attention(layer, rows, positions, q).reshape({R, H * hd}), layer.wo);
    const at::Tensor gate_up = linear(rms_norm(h, layer.ffn_norm), layer.w13);
    const int64_t F = gate_up.size(1) / 2;
    h = h + linear(at::silu(gate_up.narrow(1, 0, F)) * gate_up.narrow(1, F, F), layer.w2);
  }
  lengths_ = next;
  if (wanted.empty()) return at::empty({0, c.vocab_size}, at::kFloat);
  const at::Tensor last = h.index_select(0, long_tensor(wanted, device));
  return linear(rms_norm(last, norm_), head_).to(at::kCPU);  // the one copy back per step
}

}  // namespace cadre
