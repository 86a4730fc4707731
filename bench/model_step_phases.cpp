// Times the phases of one training step of a Llama config (forward, backward) per dtype, to
// see where a step's time goes. Usage: model_step_phases <config.yaml> [steps]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "core/config.h"
#include "models/llama/config.h"
#include "models/llama/model.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_step_phases <config.yaml> [steps]\n");
    return 2;
  }
  cadre::Config c = cadre::config_load(argv[1], {});
  const cadre::LlamaConfig m = cadre::llama_config(c.model);
  int steps = argc > 2 ? std::atoi(argv[2]) : 4;
  at::set_num_threads(static_cast<int>(c.train.threads));
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    cadre::Llama model(m);
    model.init_weights(1);
    model.to(dtype);
    at::Tensor tokens = at::randint(m.vocab_size, {c.data.batch_size, m.max_seq_len + 1}, at::kLong);
    double fwd = 0, bwd = 0;
    for (int s = 0; s <= steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      at::Tensor loss = cadre::llama_loss(model.forward(tokens.narrow(1, 0, m.max_seq_len)),
                                          tokens.narrow(1, 1, m.max_seq_len));
      auto t1 = std::chrono::steady_clock::now();
      loss.backward();
      auto t2 = std::chrono::steady_clock::now();
      if (s == 0) continue;  // warm-up
      fwd += std::chrono::duration<double>(t1 - t0).count();
      bwd += std::chrono::duration<double>(t2 - t1).count();
    }
    double tokens_per_step = double(c.data.batch_size * m.max_seq_len);
    std::printf("%-9s forward %.3f s  backward %.3f s  fwd+bwd %.0f tok/s\n", dtype == at::kFloat ? "float32" : "bfloat16",
                fwd / steps, bwd / steps, tokens_per_step * steps / (fwd + bwd));
  }
  return 0;
}
