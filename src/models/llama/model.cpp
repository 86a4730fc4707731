// Llama implementation on ATen ops.
#include "models/llama/model.h"
#include "models/llama/rope.h"

#include <c10/core/GradMode.h>

#include "core/torch_compat.h"
#if CADRE_TORCH_HAS_SDPA
#include <ATen/ops/scaled_dot_product_attention.h>
#endif

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/bf16_widening.h"
#include "models/dnnl_linear.h"
#include "models/embedding_rows.h"
#include "models/fused_causal_softmax.h"
#include "models/fused_cross_entropy.h"
#include "models/fused_rms_norm.h"
#include "models/fused_rope.h"
#include "models/fused_swiglu.h"
#include "models/linear_grad_into_weight.h"
#include "models/llama/init.h"
#include "models/lora.h"
#include "shard/deferred_param.h"
#include "shard/module_hooks.h"
#include "shard/tp_collectives.h"
#include "shard/vocab_parallel.h"

namespace cadre {

namespace {
// A parameter's tensor: uninitialised, or without storage when the model is built deferred.
at::Tensor new_param(at::IntArrayRef sizes, bool deferred) { return deferred ? deferred_empty(sizes) : at::empty(sizes); }
}  // namespace

Embedding::Embedding(int64_t vocab, int64_t dim, bool deferred) {
  weight = register_parameter("weight", new_param({vocab, dim}, deferred));
}

RMSNorm::RMSNorm(int64_t dim, double eps_, bool deferred) : eps(eps_) {
  weight = register_parameter("weight", deferred ? deferred_empty({dim}) : at::ones({dim}));
}

at::Tensor RMSNorm::forward(const at::Tensor& x) const { return rms_norm(x, weight, eps); }

namespace {
// Batched a @ b for [N, m, k] x [N, k, n]. libtorch's CPU bmm in float32 (no MKL in Debian's
// build) runs several times slower than one BLAS gemm per matrix, so float32 loops over the
// batch; bfloat16 bmm goes through oneDNN and is fast as it is, where the CPU has AVX-512
// (elsewhere widened: models/bf16_widening.h).
at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() == at::kBFloat16 && a.device().is_cpu() && bf16_linear_widens()) return widened_bmm(a, b);
  if (a.scalar_type() != at::kFloat || !a.device().is_cpu()) return at::bmm(a, b);
  // unbind, not a[i]: its backward is one stack, where indexing would build a full-size
  // zero gradient per matrix.
  std::vector<at::Tensor> as = a.unbind(0), bs = b.unbind(0), parts;
  parts.reserve(as.size());
  for (size_t i = 0; i < as.size(); ++i) parts.push_back(at::mm(as[i], bs[i]));
  return at::stack(parts);
}

// [B, KV, T, hd] -> [B, KV * rep, T, hd], each kv head serving `rep` query heads.
at::Tensor repeat_kv(const at::Tensor& x, int64_t rep) {
  if (rep == 1) return x;
  auto s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], rep, s[2], s[3]}).reshape({s[0], s[1] * rep, s[2], s[3]});
}
}  // namespace

Attention::Attention(const LlamaConfig& c, bool deferred)
    : n_heads(c.n_heads), n_kv_heads(c.n_kv_heads), head_dim(c.dim / c.n_heads), config_(c) {
  wq = register_module("wq", std::make_shared<Projection>(c.dim, n_heads * head_dim, deferred));
  wk = register_module("wk", std::make_shared<Projection>(c.dim, n_kv_heads * head_dim, deferred));
  wv = register_module("wv", std::make_shared<Projection>(c.dim, n_kv_heads * head_dim, deferred));
  wo = register_module("wo", std::make_shared<Projection>(n_heads * head_dim, c.dim, deferred));
}

at::Tensor Attention::forward(const at::Tensor& input, const Positions& positions) const {
  const int64_t B = input.size(0), T = input.size(1);
  // Tensor parallel: this rank's heads (q, k, v column-parallel); wo sums the heads' parts.
  const at::Tensor x = tp_group ? copy_to_tp_region(input, *tp_group) : input;
  at::Tensor q = wq->forward(x).view({B, T, n_heads, head_dim}).transpose(1, 2);
  at::Tensor k = wk->forward(x).view({B, T, n_kv_heads, head_dim}).transpose(1, 2);
  at::Tensor v = wv->forward(x).view({B, T, n_kv_heads, head_dim}).transpose(1, 2);
  const at::Tensor out = positions.documents.empty() ? attend_rotated(q, k, v, positions.cos, positions.sin)
                                                     : attend_documents(q, k, v, positions);
  return tp_group ? reduce_from_tp_region(wo->forward(out), *tp_group) : wo->forward(out);
}

at::Tensor Attention::attend_rotated(at::Tensor q, at::Tensor k, at::Tensor v, const at::Tensor& cos,
                                     const at::Tensor& sin) const {
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  return attend(q, repeat_kv(k, n_heads / n_kv_heads), repeat_kv(v, n_heads / n_kv_heads));
}

at::Tensor Attention::attend_documents(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const Positions& positions) const {
  std::vector<at::Tensor> windows;
  for (int64_t b = 0; b < q.size(0); ++b) {
    std::vector<at::Tensor> parts;
    int64_t start = 0;
    for (const int64_t length : positions.documents[b]) {
      auto part = [&](const at::Tensor& t) { return t.narrow(0, b, 1).narrow(2, start, length); };
      parts.push_back(attend_rotated(part(q), part(k), part(v), positions.cos.narrow(0, 0, length),
                                     positions.sin.narrow(0, 0, length)));
      start += length;
    }
    windows.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, 1));
  }
  return windows.size() == 1 ? windows[0] : at::cat(windows, 0);
}

at::Tensor Attention::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
  const int64_t B = q.size(0), T = q.size(2);
#if CADRE_TORCH_HAS_SDPA
  if (llama_uses_sdpa(config_, q.is_cuda()))
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true)
        .transpose(1, 2)
        .reshape({B, T, n_heads * head_dim});
#endif
  at::Tensor q3 = q.reshape({B * n_heads, T, head_dim});
  at::Tensor k3 = k.reshape({B * n_heads, T, head_dim});
  at::Tensor v3 = v.reshape({B * n_heads, T, head_dim});
  // Scaled, causally masked and normalised in one function, in float32 sums.
  at::Tensor probs = causal_softmax(batched_matmul(q3, k3.transpose(1, 2)), 1.0 / std::sqrt(double(head_dim)));
  return batched_matmul(probs, v3).view({B, n_heads, T, head_dim}).transpose(1, 2).reshape({B, T, n_heads * head_dim});
}

FeedForward::FeedForward(int64_t dim, int64_t hidden, bool deferred) {
  w1 = register_module("w1", std::make_shared<Projection>(dim, hidden, deferred));
  w2 = register_module("w2", std::make_shared<Projection>(hidden, dim, deferred));
  w3 = register_module("w3", std::make_shared<Projection>(dim, hidden, deferred));
}

at::Tensor FeedForward::forward(const at::Tensor& input) const {
  if (!tp_group) return w2->forward(swiglu(w1->forward(input), w3->forward(input)));
  // Tensor parallel: this rank's columns of the hidden layer; w2 sums their parts.
  const at::Tensor x = copy_to_tp_region(input, *tp_group);
  return reduce_from_tp_region(w2->forward(swiglu(w1->forward(x), w3->forward(x))), *tp_group);
}

Block::Block(const LlamaConfig& c, bool deferred) {
  attention = register_module("attention", std::make_shared<Attention>(c, deferred));
  feed_forward = register_module("feed_forward", std::make_shared<FeedForward>(c.dim, llama_ffn_dim(c), deferred));
  attention_norm = register_module("attention_norm", std::make_shared<RMSNorm>(c.dim, c.norm_eps, deferred));
  ffn_norm = register_module("ffn_norm", std::make_shared<RMSNorm>(c.dim, c.norm_eps, deferred));
}

at::Tensor Block::forward(const at::Tensor& x, const Positions& positions) const {
  at::Tensor h = x + attention->forward(attention_norm->forward(x), positions);
  return h + feed_forward->forward(ffn_norm->forward(h));
}

BlockList::BlockList(const LlamaConfig& c, bool deferred) {
  for (int64_t i = 0; i < c.n_layers; ++i) {
    blocks.push_back(register_module(std::to_string(i), std::make_shared<Block>(c, deferred)));
    index.push_back(i);
  }
}

void BlockList::keep(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  auto kept_by_range = [&](int64_t i) {
    return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first <= i && i < r.second; });
  };
  for (const auto& [begin, end] : ranges) {
    bool held = begin < end;
    for (int64_t i = begin; i < end; ++i) held = held && holds(i);
    CADRE_CHECK(held, "Llama: a stage of blocks [", begin, ", ", end, ") that are not all held");
  }
  std::vector<std::shared_ptr<Block>> kept;
  std::vector<int64_t> kept_index;
  for (size_t k = 0; k < blocks.size(); ++k) {
    if (kept_by_range(index[k])) {
      kept.push_back(blocks[k]);
      kept_index.push_back(index[k]);
    } else {
      unregister_module(std::to_string(index[k]));
    }
  }
  blocks = std::move(kept);
  index = std::move(kept_index);
}

bool BlockList::holds(int64_t i) const { return std::binary_search(index.begin(), index.end(), i); }

const std::shared_ptr<Block>& BlockList::block(int64_t i) const {
  const auto at = std::lower_bound(index.begin(), index.end(), i);
  CADRE_CHECK(at != index.end() && *at == i, "Llama: block ", i, " is not one this stage holds");
  return blocks[size_t(at - index.begin())];
}

Llama::Llama(const LlamaConfig& c, bool deferred) : config_(c) {
  tok_embeddings = register_module("tok_embeddings", std::make_shared<Embedding>(c.vocab_size, c.dim, deferred));
  layers = register_module("layers", std::make_shared<BlockList>(c, deferred));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.dim, c.norm_eps, deferred));
  if (!c.tie_embeddings)
    output = register_module("output", std::make_shared<Projection>(c.dim, c.vocab_size, deferred));

  // Rotary tables: frequency theta^(-2i/hd) for i < hd/2 (scaled as the config says),
  // duplicated for the two halves.
  const int64_t hd = c.dim / c.n_heads;
  at::Tensor angles = at::outer(at::arange(c.max_seq_len, at::kDouble), rope_inv_freq(c, hd));
  angles = at::cat({angles, angles}, -1);
  rope_cos_ = angles.cos().to(at::kFloat);
  rope_sin_ = angles.sin().to(at::kFloat);
}

Positions Llama::positions_for(int64_t seq_len, at::ScalarType dtype, const c10::Device& device) {
  // The tables are plain members, not buffers (Module::to leaves them): they follow the
  // tokens' device once, so a GPU forward copies nothing from the host.
  if (rope_cos_.device() != device) {
    rope_cos_ = rope_cos_.to(device);
    rope_sin_ = rope_sin_.to(device);
  }
  return {rope_cos_.narrow(0, 0, seq_len).to(dtype), rope_sin_.narrow(0, 0, seq_len).to(dtype), {}};
}

namespace {
// Packed windows' documents must tile each window: one list per window, lengths > 0 summing to T.
void check_documents(const std::vector<std::vector<int64_t>>& documents, int64_t B, int64_t T) {
  CADRE_CHECK(static_cast<int64_t>(documents.size()) == B, "Llama.forward: ", documents.size(),
              " document lists for a batch of ", B, " windows");
  for (int64_t b = 0; b < B; ++b) {
    int64_t sum = 0;
    for (const int64_t length : documents[b]) {
      CADRE_CHECK(length > 0, "Llama.forward: window ", b, " has a document of length ", length);
      sum += length;
    }
    CADRE_CHECK(sum == T, "Llama.forward: window ", b, "'s documents cover ", sum, " of its ", T, " tokens");
  }
}
}  // namespace

at::Tensor Llama::forward(const at::Tensor& input, const std::vector<std::vector<int64_t>>& documents) {
  const std::vector<int64_t>& held = layers->index;
  CADRE_CHECK(held.empty() || held.back() - held.front() + 1 == int64_t(held.size()),
              "Llama.forward: this module holds several chunks of blocks; run them one at a time");
  return forward(input, documents, held.empty() ? 0 : held.front(), held.empty() ? 0 : held.back() + 1);
}

at::Tensor Llama::forward(const at::Tensor& input, const std::vector<std::vector<int64_t>>& documents, int64_t begin,
                          int64_t end) {
  const bool embeds = has_embedding() && begin == 0, heads = has_head() && end == config_.n_layers;
  at::Tensor h = embeds ? embed(input) : input;
  h = run_blocks(std::move(h), begin, end, documents);
  return heads ? head(std::move(h)) : h;
}

void Llama::keep_stage(const std::vector<std::pair<int64_t, int64_t>>& ranges, bool first, bool last) {
  layers->keep(ranges);
  embeds_ = first;
  // A tied head reads the embedding's table: the last stage keeps its own copy (Megatron's way;
  // the pipeline sums the two stages' gradients of it, so both take the same steps).
  if (!first && !(last && config_.tie_embeddings)) {
    unregister_module("tok_embeddings");
    tok_embeddings.reset();
  }
  if (!last) {
    unregister_module("norm");
    norm.reset();
    if (output) unregister_module("output");
    output.reset();
  }
}

at::Tensor Llama::embed(const at::Tensor& tokens) {
  CADRE_CHECK(tokens.dim() == 2, "Llama.forward: tokens must be [batch, seq], got ", tokens.sizes());
  const at::Tensor& table = tok_embeddings->weight;
  return tp_group                ? vocab_parallel_embedding(table, tokens, vocab_start, *tp_group)
         : sparse_embedding_grad ? embedding_rows(table, tokens)
                                 : at::embedding(table, tokens);
}

at::Tensor Llama::run_blocks(at::Tensor h, int64_t begin, int64_t end,
                             const std::vector<std::vector<int64_t>>& documents) {
  CADRE_CHECK(h.dim() == 3 && begin <= end && (begin == end || (layers->holds(begin) && layers->holds(end - 1))),
              "Llama.run_blocks: blocks [", begin, ", ", end, ") over ", h.sizes(), ", not all of them held");
  const int64_t T = h.size(1);
  CADRE_CHECK(T <= config_.max_seq_len, "Llama.forward: sequence length ", T, " exceeds model.max_seq_len ",
              config_.max_seq_len);
  if (!documents.empty()) check_documents(documents, h.size(0), T);
  Positions positions = positions_for(T, h.scalar_type(), h.device());
  // Windows of one document each attend as unpacked ones do (one call for the whole batch).
  const bool one_each = std::all_of(documents.begin(), documents.end(), [](const auto& d) { return d.size() == 1; });
  if (!one_each) positions.documents = documents;
  for (int64_t b = begin; b < end; ++b) h = call(layers->block(b), h, positions);
  return h;
}

at::Tensor Llama::head(at::Tensor h) {
  // Called through their hooks: under FSDP an untied head and the final norm are a unit of
  // their own (llama_parallelize), gathered while the last blocks compute.
  h = call(norm, h);
  if (tp_group) h = copy_to_tp_region(h, *tp_group);  // the head is column-parallel over the vocabulary
  if (output) return call(output, h);
  // Tied: the embedding's weight, whose gradient from the head goes straight into FSDP's buffer
  // where the embedding's is rows (linear_grad_into_weight.h says why).
  return sparse_embedding_grad ? linear_grad_into_weight(h, output_weight()) : linear_no_bias(h, output_weight());
}

at::Tensor Llama::loss(const at::Tensor& logits, const at::Tensor& targets) const {
  if (!tp_group) return llama_loss(logits, targets);
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), vocab_start,
                                      *tp_group);
}

void Llama::init_weights(uint64_t seed) {
  c10::NoGradGuard no_grad;
  const std::shared_ptr<const ParamSource> source = init_source(seed);
  for (auto& item : named_parameters()) {
    if (lora_is_adapter(item.key())) continue;  // an adapter's values are LoRA's (models/lora.h)
    at::Tensor& p = item.value();
    CADRE_CHECK(p.is_contiguous() && p.scalar_type() == at::kFloat && p.is_cpu(), "Llama.init_weights: '", item.key(),
                "' is not a contiguous float32 CPU tensor");
    source->read(item.key(), 0, p.numel(), p.data_ptr<float>());
  }
}

std::shared_ptr<const ParamSource> Llama::init_source(uint64_t seed) const {
  return std::make_shared<LlamaInit>(config_, seed);
}

at::Tensor llama_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
}

int64_t llama_param_count(const LlamaConfig& c) {
  const int64_t hd = c.dim / c.n_heads, ffn = llama_ffn_dim(c);
  int64_t block = c.dim * hd * (2 * c.n_heads + 2 * c.n_kv_heads) + 3 * c.dim * ffn + 2 * c.dim;
  return c.vocab_size * c.dim * (c.tie_embeddings ? 1 : 2) + c.n_layers * block + c.dim;
}

double llama_flops_per_token(const LlamaConfig& c, int64_t seq_len) {
  // The embedding lookup is not a matmul; with tied weights the head still is one.
  double matmul_params = double(llama_param_count(c)) - (c.tie_embeddings ? 0.0 : double(c.vocab_size * c.dim));
  return 6.0 * matmul_params + 12.0 * c.n_layers * seq_len * c.dim;
}

}  // namespace cadre
