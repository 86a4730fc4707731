// The Llama model's keys in the `model:` section (arch: llama), with Llama's defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace cadre {

struct LlamaConfig {
  int64_t dim = 512;
  int64_t n_layers = 8;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 8;       // grouped-query attention when < n_heads
  int64_t vocab_size = 8192;
  int64_t ffn_dim = 0;          // 0: Llama's rule, 2/3 * 4 * dim rounded up to multiple_of
  int64_t multiple_of = 256;
  int64_t max_seq_len = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  // RoPE frequency scaling, as transformers' rope_type: "none"; "linear" (every frequency divided
  // by rope_factor); "llama3" (Llama 3.1's: frequencies whose wavelength exceeds the original
  // context / low_freq_factor divided by rope_factor, those shorter than original context /
  // high_freq_factor kept, a smooth blend between). models/llama/rope.h applies it.
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_seq_len = 8192;
  bool tie_embeddings = false;
  double init_std = 0.02;
  // How attention is computed: "math" (scores, float32 softmax, weighted sum: the same on every
  // libtorch), "sdpa" (libtorch 2.x's fused scaled_dot_product_attention), or "auto": sdpa for
  // CUDA tensors on 2.x, math otherwise (on CPU, 2.11's fused kernel measured no faster at
  // training shapes; see docs/DESIGN.md).
  std::string attention = "auto";
};

// True when attention on tensors of `device_is_cuda` runs through scaled_dot_product_attention.
bool llama_uses_sdpa(const LlamaConfig& config, bool device_is_cuda);

// Parses and validates the section's keys (ConfigError naming the key and its source).
LlamaConfig llama_config(const ModelSection& section);
// Every key with its resolved value (for the run's config.yaml).
std::vector<RawKey> llama_config_keys(const LlamaConfig& config);

// Feed-forward width after applying Llama's sizing rule.
int64_t llama_ffn_dim(const LlamaConfig& config);

}  // namespace cadre
