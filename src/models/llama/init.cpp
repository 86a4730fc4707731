// Llama's counter-based initialisation (init.h).
#include "models/llama/init.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/text.h"

namespace cadre {

void LlamaInit::read(const std::string& name, int64_t start, int64_t count, float* out) const {
  if (ends_with(name, "norm.weight")) {  // RMSNorm scales: attention_norm, ffn_norm, norm
    std::fill(out, out + count, 1.0f);
    return;
  }
  CADRE_CHECK(ends_with(name, ".weight"), "Llama has no parameter '", name, "' to initialise");
  const bool residual = ends_with(name, "wo.weight") || ends_with(name, "w2.weight");
  const double std = residual ? config_.init_std / std::sqrt(2.0 * config_.n_layers) : config_.init_std;
  const uint64_t key = counter_rng::stream_key(seed_, name);
  // Each element is independent of the others: any split over threads gives the same bits.
  at::parallel_for(0, count, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    counter_rng::normal(key, uint64_t(start + begin), end - begin, 0.0, std, out + begin);
  });
}

std::string LlamaInit::describe() const { return str("counter-based initialisation, seed ", seed_); }

}  // namespace cadre
