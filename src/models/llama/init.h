// Llama's initial values as a ParamSource (core/param_source.h): N(0, init_std) for matrices,
// the residual output projections (wo, w2) at init_std / sqrt(2 * n_layers), norms at one. Each
// element is drawn from the counter-based generator (core/counter_rng.h) at its index in the
// whole parameter, in a stream keyed by (seed, the parameter's name): any slice of any
// parameter, on any rank, is the same bits as in a model initialised whole on one.
#pragma once

#include <cstdint>
#include <string>

#include "core/param_source.h"
#include "models/llama/config.h"

namespace cadre {

class LlamaInit : public ParamSource {
 public:
  LlamaInit(const LlamaConfig& config, uint64_t seed) : config_(config), seed_(seed) {}
  void read(const std::string& name, int64_t start, int64_t count, float* out) const override;
  std::string describe() const override;

 private:
  LlamaConfig config_;
  uint64_t seed_;
};

}  // namespace cadre
