// Llama as a libtorch module: token embedding, RMSNorm, rotary embeddings (HF rotate-half
// layout), grouped-query causal attention, SwiGLU MLP, final norm, tied or untied head.
// Parameter names follow Meta's checkpoints (layers.N.attention.wq.weight, ...). Blocks run
// through cadre::call, so FSDP units and activation checkpointing act around each one. Under
// tensor parallelism (models/llama/tensor_parallel.h) the same modules hold their part of each
// split parameter and `tp_group` is set: forwards then go through the tensor-parallel
// collectives (shard/tp_collectives.h, shard/vocab_parallel.h).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "comm/comm.h"
#include "core/param_source.h"
#include "models/llama/config.h"
#include "models/lora_linear.h"

namespace cadre {

// A bias-free linear map y = x W^T (W [out, in] like torch.nn.Linear) that lora.* can give an
// adapter (models/lora_linear.h).
using Projection = LoraLinear;

// Token embedding table [vocab, dim].
class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t vocab, int64_t dim, bool deferred = false);
  at::Tensor weight;
};

class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t dim, double eps, bool deferred = false);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight;
  double eps;
};

// Where a forward's tokens sit: rotary tables for positions 0..T-1 (cos and sin, each
// [T, head_dim]), and for packed windows the lengths of each window's documents (Batch's
// `documents`; empty: each window is one sequence).
struct Positions {
  at::Tensor cos, sin;
  std::vector<std::vector<int64_t>> documents;
};

class Attention : public torch::nn::Module {
 public:
  explicit Attention(const LlamaConfig& config, bool deferred = false);
  at::Tensor forward(const at::Tensor& x, const Positions& positions) const;
  std::shared_ptr<Projection> wq, wk, wv, wo;
  int64_t n_heads, n_kv_heads, head_dim;  // heads on this rank
  comm::Communicator* tp_group = nullptr;  // q/k/v column-parallel, wo row-parallel over it

 private:
  // Causal attention of q, k, v [B, H, T, hd] (k, v already repeated to H heads) -> [B, T, H * hd].
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;
  // q, k, v [B, heads, T, hd] straight from the projections: rotated (cos, sin [T, hd]), k and v
  // repeated to the query heads, then attended.
  at::Tensor attend_rotated(at::Tensor q, at::Tensor k, at::Tensor v, const at::Tensor& cos,
                            const at::Tensor& sin) const;
  // The same for each document of each window on its own (packed windows): positions from 0,
  // attending only within the document. Work is the sum of the documents' squared lengths, not T^2.
  at::Tensor attend_documents(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const Positions& positions) const;
  LlamaConfig config_;
};

class FeedForward : public torch::nn::Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, bool deferred = false);
  at::Tensor forward(const at::Tensor& x) const;
  std::shared_ptr<Projection> w1, w2, w3;  // gate, down, up
  comm::Communicator* tp_group = nullptr;  // w1/w3 column-parallel, w2 row-parallel over it
};

class Block : public torch::nn::Module {
 public:
  explicit Block(const LlamaConfig& config, bool deferred = false);
  at::Tensor forward(const at::Tensor& x, const Positions& positions) const;
  std::shared_ptr<RMSNorm> attention_norm, ffn_norm;
  std::shared_ptr<Attention> attention;
  std::shared_ptr<FeedForward> feed_forward;
};

// Holds the blocks under the names "0", "1", ... so parameters read layers.N.*. A pipeline
// stage keeps blocks [first, first + blocks.size()) under their model-wide names.
class BlockList : public torch::nn::Module {
 public:
  explicit BlockList(const LlamaConfig& config, bool deferred = false);
  // Drops every block outside the ranges [begin, end) (a pipeline stage's chunks).
  void keep(const std::vector<std::pair<int64_t, int64_t>>& ranges);
  // Block `i` in the model's numbering; error when this list does not hold it.
  const std::shared_ptr<Block>& block(int64_t i) const;
  bool holds(int64_t i) const;
  std::vector<std::shared_ptr<Block>> blocks;  // those held, in order
  std::vector<int64_t> index;                  // each one's number in the model
};

class Llama : public torch::nn::Module {
 public:
  // Deferred: the parameters have shapes and no storage (shard/deferred_param.h); sharding fills
  // each rank's shard from a ParamSource (init_source, or a checkpoint).
  explicit Llama(const LlamaConfig& config, bool deferred = false);

  // tokens [B, T] int64 -> logits [B, T, vocab] in the parameters' dtype. Under tensor
  // parallelism: this rank's vocabulary columns [vocab_start, vocab_start + vocab / tp).
  // `documents`: packed windows' document lengths (Batch::documents), or empty. A pipeline
  // stage (keep_stage) runs the parts it holds: without the embedding `input` is the previous
  // stage's hidden state [B, T, dim], without the head it returns its own.
  at::Tensor forward(const at::Tensor& input, const std::vector<std::vector<int64_t>>& documents = {});
  // One pipeline chunk of what this module holds: blocks [begin, end), the embedding before them
  // when they start at block 0, the norm and head after them when they end at the last block.
  at::Tensor forward(const at::Tensor& input, const std::vector<std::vector<int64_t>>& documents, int64_t begin,
                     int64_t end);
  // Keeps only a pipeline stage's parts: the blocks of each range [begin, end) (its chunks),
  // the embedding if `first`, the final norm and head if `last`; the others are dropped (built
  // deferred, they never held storage). With tied embeddings a last stage that is not also the
  // first keeps the embedding's table for its head (mirrors_embedding).
  void keep_stage(const std::vector<std::pair<int64_t, int64_t>>& ranges, bool first, bool last);
  // forward in its three parts, for a pipeline stage that holds some of them: forward is
  // head(run_blocks(embed(tokens), 0, n_layers)), op for op. embed: tokens [B, T] -> hidden
  // [B, T, dim]; run_blocks: blocks [begin, end) (model-wide indices, of those this module
  // holds) over a hidden state; head: the final norm and the head -> logits.
  at::Tensor embed(const at::Tensor& tokens);
  at::Tensor run_blocks(at::Tensor h, int64_t begin, int64_t end,
                        const std::vector<std::vector<int64_t>>& documents = {});
  at::Tensor head(at::Tensor h);
  // Mean next-token cross-entropy of forward's logits against targets [B, T], float32; under
  // tensor parallelism without gathering the logits.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets) const;

  // Deterministic initialisation from a seed: N(0, init_std) for matrices, with the residual
  // output projections (wo, w2) scaled by 1/sqrt(2 * n_layers); norms start at one. Each
  // element is a function of (seed, parameter name, index) (models/llama/init.h), so the
  // whole model here and the shards a deferred model fills from init_source are the same bits.
  // LoRA adapters (models/lora.h) are left to lora_init_adapters.
  void init_weights(uint64_t seed);
  std::shared_ptr<const ParamSource> init_source(uint64_t seed) const;

  const LlamaConfig& config() const { return config_; }
  at::Tensor output_weight() const { return output ? output->weight : tok_embeddings->weight; }
  // What this module runs (all of it unless keep_stage dropped some): the token lookup, and the
  // final norm and head.
  bool has_embedding() const { return tok_embeddings && embeds_; }
  bool has_head() const { return bool(norm); }
  // A tied head's table held by a last pipeline stage that does not look tokens up: a copy of
  // the first stage's, kept equal by summing the two stages' gradients of it.
  bool mirrors_embedding() const { return tok_embeddings && !embeds_; }
  // Rotary tables [max_seq_len, head_dim], float32 (the cached decoder uses the same ones).
  const at::Tensor& rope_cos() const { return rope_cos_; }
  const at::Tensor& rope_sin() const { return rope_sin_; }

  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<BlockList> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Projection> output;  // null when tie_embeddings
  comm::Communicator* tp_group = nullptr;  // vocabulary-parallel embedding and head over it
  int64_t vocab_start = 0;                 // first vocabulary row this rank holds
  // The embedding's gradient as the rows the batch looked up (models/embedding_rows.h) instead
  // of a dense vocabulary x dim tensor: set where the weight's .grad is already a dense buffer
  // the rows are added into (FSDP's flat gradient, llama_parallelize). A tied head then adds its
  // gradient into that buffer in its backward too (models/linear_grad_into_weight.h).
  bool sparse_embedding_grad = false;

 private:
  Positions positions_for(int64_t seq_len, at::ScalarType dtype, const c10::Device& device);

  LlamaConfig config_;
  at::Tensor rope_cos_, rope_sin_;  // [max_seq_len, head_dim], float32
  bool embeds_ = true;              // looks tokens up: not a later pipeline stage
};

// Mean next-token cross-entropy of logits [B, T, V] against targets [B, T], in float32.
at::Tensor llama_loss(const at::Tensor& logits, const at::Tensor& targets);

// Parameter count and FLOPs per token for a forward+backward pass: 6 * (matmul parameters)
// plus attention's 12 * n_layers * seq_len * dim (PaLM's accounting, causal mask not halved).
int64_t llama_param_count(const LlamaConfig& config);
double llama_flops_per_token(const LlamaConfig& config, int64_t seq_len);

}  // namespace cadre
