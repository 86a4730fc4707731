// The smallest Llama the model tests build: every feature on (grouped-query attention, an untied
// head, two blocks) at a size that runs forward and backward in milliseconds.
#pragma once

#include "models/llama/config.h"

namespace cadre::test {

inline LlamaConfig tiny_llama_config() {
  LlamaConfig m;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;  // grouped-query attention
  m.vocab_size = 96;
  m.multiple_of = 32;
  m.max_seq_len = 32;
  return m;
}

}  // namespace cadre::test
