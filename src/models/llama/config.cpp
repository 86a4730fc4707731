// Llama's config keys: a field table over LlamaConfig, then cross-field checks.
#include "models/llama/config.h"

#include "core/error.h"
#include "core/torch_compat.h"

namespace cadre {
namespace {

std::vector<Field> llama_fields(LlamaConfig& m) {
  return {
      {"model.dim", &m.dim},
      {"model.n_layers", &m.n_layers},
      {"model.n_heads", &m.n_heads},
      {"model.n_kv_heads", &m.n_kv_heads},
      {"model.vocab_size", &m.vocab_size},
      {"model.ffn_dim", &m.ffn_dim},
      {"model.multiple_of", &m.multiple_of},
      {"model.max_seq_len", &m.max_seq_len},
      {"model.norm_eps", &m.norm_eps},
      {"model.rope_theta", &m.rope_theta},
      {"model.rope_scaling", &m.rope_scaling},
      {"model.rope_factor", &m.rope_factor},
      {"model.rope_low_freq_factor", &m.rope_low_freq_factor},
      {"model.rope_high_freq_factor", &m.rope_high_freq_factor},
      {"model.rope_original_max_seq_len", &m.rope_original_max_seq_len},
      {"model.tie_embeddings", &m.tie_embeddings},
      {"model.init_std", &m.init_std},
      {"model.attention", &m.attention},
  };
}

void attention_check(const LlamaConfig& m) {
  CADRE_CONFIG_CHECK(m.attention == "auto" || m.attention == "math" || m.attention == "sdpa", "model.attention = '",
                     m.attention, "' is not one of auto, math, sdpa");
  CADRE_CONFIG_CHECK(m.attention != "sdpa" || CADRE_TORCH_HAS_SDPA, "model.attention = 'sdpa' needs libtorch 2.x "
                     "(this build has ", TORCH_VERSION, "); use auto or math");
}

// The scaling's name and its parameters. A factor with no scaling is a config that meant one.
void rope_scaling_check(const LlamaConfig& m) {
  const std::string& s = m.rope_scaling;
  CADRE_CONFIG_CHECK(s == "none" || s == "linear" || s == "llama3", "model.rope_scaling = '", s,
                     "' is not one of none, linear, llama3");
  if (s == "none") {
    CADRE_CONFIG_CHECK(m.rope_factor == 1.0, "model.rope_factor = ", m.rope_factor,
                       " has no effect with model.rope_scaling none (set linear or llama3)");
    return;
  }
  CADRE_CONFIG_CHECK(m.rope_factor >= 1.0, "model.rope_factor = ", m.rope_factor,
                     " must be >= 1 (it stretches the context RoPE was trained on)");
  if (s == "llama3") {
    CADRE_CONFIG_CHECK(m.rope_low_freq_factor > 0 && m.rope_high_freq_factor > m.rope_low_freq_factor,
                       "model.rope_high_freq_factor (", m.rope_high_freq_factor,
                       ") must exceed model.rope_low_freq_factor (", m.rope_low_freq_factor, ") > 0");
    CADRE_CONFIG_CHECK(m.rope_original_max_seq_len > 0, "model.rope_original_max_seq_len must be positive");
  }
}

}  // namespace

LlamaConfig llama_config(const ModelSection& section) {
  LlamaConfig m;
  fields_apply(llama_fields(m), section.keys);
  CADRE_CONFIG_CHECK(m.dim > 0 && m.n_layers > 0 && m.n_heads > 0 && m.n_kv_heads > 0,
                     "model.dim, n_layers, n_heads and n_kv_heads must be positive");
  CADRE_CONFIG_CHECK(m.dim % m.n_heads == 0, "model.dim (", m.dim, ") must be divisible by model.n_heads (",
                     m.n_heads, ")");
  CADRE_CONFIG_CHECK((m.dim / m.n_heads) % 2 == 0, "model.dim / model.n_heads must be even for rotary embeddings");
  CADRE_CONFIG_CHECK(m.n_kv_heads <= m.n_heads && m.n_heads % m.n_kv_heads == 0,
                     "model.n_kv_heads (", m.n_kv_heads, ") must divide model.n_heads (", m.n_heads, ")");
  CADRE_CONFIG_CHECK(m.vocab_size > 0, "model.vocab_size must be positive");
  CADRE_CONFIG_CHECK(m.max_seq_len > 0, "model.max_seq_len must be positive");
  CADRE_CONFIG_CHECK(m.ffn_dim >= 0 && m.multiple_of > 0, "model.ffn_dim must be >= 0 and model.multiple_of > 0");
  CADRE_CONFIG_CHECK(m.norm_eps > 0 && m.rope_theta > 0 && m.init_std > 0,
                     "model.norm_eps, model.rope_theta and model.init_std must be positive");
  rope_scaling_check(m);
  attention_check(m);
  return m;
}

bool llama_uses_sdpa(const LlamaConfig& config, bool device_is_cuda) {
  if (!CADRE_TORCH_HAS_SDPA) return false;
  return config.attention == "sdpa" || (config.attention == "auto" && device_is_cuda);
}

std::vector<RawKey> llama_config_keys(const LlamaConfig& config) {
  LlamaConfig copy = config;
  return fields_dump(llama_fields(copy), "resolved");
}

int64_t llama_ffn_dim(const LlamaConfig& m) {
  if (m.ffn_dim > 0) return m.ffn_dim;
  int64_t hidden = 2 * (4 * m.dim) / 3;
  return m.multiple_of * ((hidden + m.multiple_of - 1) / m.multiple_of);
}

}  // namespace cadre
