// The cached forward as tensor operations on the decoder's device: norms, rotary, SwiGLU and
// the matrices over all rows at once, attention per slot over that slot's cache.
#include "models/llama/decode_device.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "core/error.h"
#include "models/llama/decoder_weights.h"

namespace cadre {
namespace {

using at::indexing::Slice;

// Appends `values` to `packed`; returns where they start.
int64_t append(std::vector<int64_t>& packed, const std::vector<int64_t>& values) {
  const int64_t at = static_cast<int64_t>(packed.size());
  packed.insert(packed.end(), values.begin(), values.end());
  return at;
}

// `packed` on the device in one copy: from pinned host memory without waiting on a GPU (the
// caching host allocator keeps the buffer until the copy has run), the buffer itself on the CPU.
at::Tensor packed_to(const std::vector<int64_t>& packed, const c10::Device& device) {
  at::Tensor host = at::empty({static_cast<int64_t>(packed.size())},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  std::copy(packed.begin(), packed.end(), host.data_ptr<int64_t>());
  return device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
}

}  // namespace

LlamaDeviceDecoder::LlamaDeviceDecoder(const Llama& model, DecodeOptions options, const ParamSource* weights)
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
  LlamaDecoderWeights w = llama_decoder_weights(model, weights, options_.weight_dtype, device);
  weight_bytes_ = w.bytes();
  embedding_ = w.embedding;
  norm_ = w.norm;
  head_ = w.head;
  rope_cos_ = model.rope_cos().to(device).contiguous();
  rope_sin_ = model.rope_sin().to(device).contiguous();
  for (auto& weights_of_layer : w.layers) {
    // Zeros, not empty: attention multiplies the masked (future) positions' values by a weight
    // of 0, and 0 x NaN would be NaN.
    at::Tensor k = at::zeros({options_.slots, c.n_kv_heads, options_.max_len, head_dim_},
                             at::TensorOptions().dtype(options_.weight_dtype).device(device));
    layers_.push_back(Layer{std::move(weights_of_layer), k, at::zeros_like(k)});
  }
  lengths_.assign(static_cast<size_t>(options_.slots), 0);
}

void LlamaDeviceDecoder::reset(int64_t slot) {
  CADRE_CHECK(slot >= 0 && slot < options_.slots, "decoder: no slot ", slot);
  lengths_[static_cast<size_t>(slot)] = 0;
}

int64_t LlamaDeviceDecoder::weight_bytes() const { return weight_bytes_; }

int64_t LlamaDeviceDecoder::cache_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_) bytes += l.k_cache.nbytes() + l.v_cache.nbytes();
  return bytes;
}

int64_t LlamaDeviceDecoder::cache_bytes_per_token() const {
  return 2 * config_.n_layers * config_.n_kv_heads * head_dim_ * static_cast<int64_t>(c10::elementSize(options_.weight_dtype));
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

// Every index the step's layers use, packed into one host buffer and copied once (a small
// pageable copy per slot per layer would each wait for the GPU): rows' positions, slots and
// tokens, the rows whose logits are wanted, then per slot its rows and their positions. The
// causal masks are made from them on the device, once per step.
LlamaDeviceDecoder::StepIndex LlamaDeviceDecoder::step_index(const std::vector<int64_t>& positions,
                                                             const std::vector<int64_t>& slots,
                                                             const std::vector<int64_t>& tokens,
                                                             const std::vector<int64_t>& wanted) const {
  const int64_t R = static_cast<int64_t>(positions.size()), W = static_cast<int64_t>(wanted.size());
  std::map<int64_t, std::vector<int64_t>> rows_of_slot;
  for (int64_t r = 0; r < R; ++r) rows_of_slot[slots[static_cast<size_t>(r)]].push_back(r);
  std::vector<int64_t> packed;
  packed.reserve(static_cast<size_t>(5 * R + W));
  const int64_t at_pos = append(packed, positions), at_slot = append(packed, slots), at_tok = append(packed, tokens);
  const int64_t at_wanted = append(packed, wanted);
  std::vector<std::pair<int64_t, int64_t>> slot_offsets;  // where each slot's rows and positions start
  for (const auto& [slot, members] : rows_of_slot) {
    std::vector<int64_t> pos;
    for (int64_t r : members) pos.push_back(positions[static_cast<size_t>(r)]);
    slot_offsets.emplace_back(append(packed, members), append(packed, pos));
  }
  const c10::Device device = options_.device;
  const at::Tensor all = packed_to(packed, device);
  StepIndex index{all.narrow(0, at_pos, R), all.narrow(0, at_slot, R), all.narrow(0, at_tok, R),
                  all.narrow(0, at_wanted, W), {}};
  size_t g = 0;
  for (const auto& [slot, members] : rows_of_slot) {
    const int64_t m = static_cast<int64_t>(members.size());
    int64_t n = 0;
    for (int64_t r : members) n = std::max(n, positions[static_cast<size_t>(r)] + 1);
    const at::Tensor pos = all.narrow(0, slot_offsets[g].second, m);
    const at::Tensor future =
        at::arange(n, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0) > pos.unsqueeze(1);  // [m, n]
    index.groups.push_back({slot, n, all.narrow(0, slot_offsets[g].first, m), future.unsqueeze(0)});
    ++g;
  }
  return index;
}

// q [R, H, hd] (rotated). Rows of one slot attend together to that slot's cache, each up to its
// own position (the rows later in the same call are masked out).
at::Tensor LlamaDeviceDecoder::attention(const Layer& layer, const StepIndex& index, const at::Tensor& q) const {
  const int64_t H = config_.n_heads, KV = config_.n_kv_heads, hd = head_dim_;
  at::Tensor out = at::empty({q.size(0), H, hd}, q.options());
  const double scale = 1.0 / std::sqrt(double(hd));
  for (const StepIndex::SlotRows& group : index.groups) {
    const at::Tensor qs = q.index_select(0, group.rows).transpose(0, 1) * scale;  // [H, m, hd], scaled first as in training
    at::Tensor k = layer.k_cache[group.slot].narrow(1, 0, group.n).to(at::kFloat);
    at::Tensor v = layer.v_cache[group.slot].narrow(1, 0, group.n).to(at::kFloat);
    k = k.repeat_interleave(H / KV, 0);  // [H, n, hd]
    v = v.repeat_interleave(H / KV, 0);
    const at::Tensor scores = at::matmul(qs, k.transpose(1, 2)).masked_fill(group.future, -INFINITY);  // [H, m, n]
    out.index_copy_(0, group.rows, at::matmul(at::softmax(scores, -1), v).transpose(0, 1));
  }
  return out;
}

at::Tensor LlamaDeviceDecoder::forward(const std::vector<DecodeRow>& rows) {
  const LlamaConfig& c = config_;
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.n_heads, KV = c.n_kv_heads, hd = head_dim_;
  const int64_t L = options_.max_len;
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
  const StepIndex index = step_index(positions, slots, tokens, wanted);
  const at::Tensor &pos_t = index.positions, &slot_t = index.slots;
  const at::Tensor cos = rope_cos_.index_select(0, pos_t).unsqueeze(1), sin = rope_sin_.index_select(0, pos_t).unsqueeze(1);
  at::Tensor h = embedding_.index_select(0, index.tokens).to(at::kFloat);  // [R, D]
  for (Layer& layer : layers_) {
    const at::Tensor qkv = linear(rms_norm(h, layer.attention_norm), layer.wqkv);
    const at::Tensor q = rope(qkv.narrow(1, 0, H * hd).view({R, H, hd}), cos, sin);
    const at::Tensor k = rope(qkv.narrow(1, H * hd, KV * hd).view({R, KV, hd}), cos, sin);
    const at::Tensor v = qkv.narrow(1, (H + KV) * hd, KV * hd).view({R, KV, hd});
    // Every row's key and value go in first, so later rows of a slot see earlier ones.
    layer.k_cache.index_put_({slot_t, Slice(), pos_t}, k.to(layer.k_cache.scalar_type()));
    layer.v_cache.index_put_({slot_t, Slice(), pos_t}, v.to(layer.v_cache.scalar_type()));
    h = h + linear(attention(layer, index, q).reshape({R, H * hd}), layer.wo);
    const at::Tensor gate_up = linear(rms_norm(h, layer.ffn_norm), layer.w13);
    const int64_t F = gate_up.size(1) / 2;
    h = h + linear(at::silu(gate_up.narrow(1, 0, F)) * gate_up.narrow(1, F, F), layer.w2);
  }
  lengths_ = next;
  if (wanted.empty()) return at::empty({0, c.vocab_size}, at::kFloat);
  const at::Tensor last = h.index_select(0, index.wanted);
  return linear(rms_norm(last, norm_), head_).to(at::kCPU);  // the one copy back per step
}

}  // namespace cadre
