// The LoRA adapters a Llama decoder serves beside its base (Decoder::add_adapter, `cadre serve
// --lora`): for each adapter, each block's adapted projections' factors, in the decoder's weight
// dtype (a bf16 base's adapters in bf16, as vLLM keeps them: half the bytes each step streams,
// rounded as the base's weights were). A row that names an adapter gets y += scale * (x A^T) B^T
// on each of them, computed for that row alone, so its result does not depend on what else is
// in the batch (the decoder's promise) and rows of different adapters and of the base share one
// decoding step. The work is two small vector loops per row (rank x in, out x rank): no tensor
// op per row, whose dispatch would cost more than the arithmetic.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <string>
#include <vector>

#include "models/llama/config.h"
#include "models/model.h"

namespace cadre {

class LlamaDecodeAdapters {
 public:
  // The projections of a block, in the packed layout the decoder computes them: q, k, v in one
  // output, gate and up in another.
  enum Projection { Q, K, V, O, Gate, Up, Down, kProjections };

  LlamaDecodeAdapters(const LlamaConfig& config, at::ScalarType factor_dtype);
  // ConfigError naming the adapter and the factor when it adapts something other than a block's
  // projection, or a factor's shape does not fit. Returns the adapter's index.
  int64_t add(const LoraWeights& weights);
  int64_t count() const { return static_cast<int64_t>(adapters_.size()); }
  // Whether any row names an adapter (else the decoder skips every apply).
  bool used_by(const std::vector<DecodeRow>& rows) const;
  // Adds each row's adapter delta for projection `p` of block `layer` (input x [rows, in],
  // contiguous) into its output's columns in y [rows, ...] (q, k and v at their offsets in the
  // packed output). Each row on one thread, with batch_invariant_lowrank_add's fixed arithmetic
  // (models/batch_invariant_linear.h), so the order of rows changes no bit.
  void apply(int64_t layer, Projection p, const std::vector<DecodeRow>& rows, const at::Tensor& x, at::Tensor& y) const;

 private:
  struct Factors {
    // A [rank, in] and B transposed, [rank, out] (B x is then rank passes over contiguous rows);
    // undefined where the adapter leaves the projection alone.
    at::Tensor a, bt;
  };
  struct Adapter {
    std::string name;
    double scale = 0;
    std::vector<std::array<Factors, kProjections>> layers;
  };
  int64_t in_features(Projection p) const;
  int64_t out_features(Projection p) const;
  int64_t offset(Projection p) const;  // where p's output starts in the packed output

  LlamaConfig config_;
  at::ScalarType factor_dtype_;
  int64_t head_dim_ = 0, ffn_ = 0;
  std::vector<Adapter> adapters_;
};

}  // namespace cadre
