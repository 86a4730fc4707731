// Dropout on a LoRA adapter's input with counter-based masks: whether element (sample s, position
// t, column c) of a layer's input is dropped is a function of (train.seed, the layer's name, the
// step, s's index in the step's global batch, t, c) alone. A tensor-parallel rank that holds
// columns [c0, c0 + n) of the input draws exactly those columns of the mask, and a sample draws
// the same mask on whichever data-parallel rank and in whichever micro-batch it lands, so a run
// with dropout on N ranks (any dp x tp, any grad_accum_steps) draws the masks one rank draws, and
// activation checkpointing's recomputation draws the forward's. (torch's dropout draws from a
// generator whose stream depends on what else was drawn: different masks per layout.)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

namespace cadre {

// Which masks the micro-batch about to run draws: the step and where its samples sit in the
// step's global batch (micro-batch m of a data-parallel rank r with batch B, dp ranks: from
// m * B * dp + r * B on). A pipeline micro-batch joins several data micro-batches, whose samples
// are runs of `run` (B) consecutive ones `run_stride` (B * dp) apart; run 0: one run. Set by the
// trainer before each micro-batch's forward, and under pipeline stages before its backward too;
// kept until the next one (the backward's recomputation reads it, on whichever thread autograd
// runs it).
struct DropoutDraw {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t first_sample = 0;
  int64_t run = 0, run_stride = 0;
  // Where the micro-batch's sample `s` sits in the step's global batch.
  int64_t sample(int64_t s) const { return run > 0 ? first_sample + s / run * run_stride + s % run : first_sample + s; }
};
void set_dropout_draw(const std::optional<DropoutDraw>& draw);

// Sets draws for a scope (a step's micro-batches) and clears them when it ends, thrown or not.
class DropoutDrawScope {
 public:
  DropoutDrawScope() = default;
  DropoutDrawScope(const DropoutDrawScope&) = delete;
  DropoutDrawScope& operator=(const DropoutDrawScope&) = delete;
  ~DropoutDrawScope() { set_dropout_draw(std::nullopt); }
  void set(const DropoutDraw& draw) { set_dropout_draw(draw); }
};

// x [samples, positions..., columns] with the layer's input columns [column_offset,
// column_offset + columns) of `total_columns` (tensor parallel; 0 and columns otherwise): x with
// each element dropped with probability p and the rest scaled by 1 / (1 - p). Without a draw set
// (a module trained outside the trainer) torch's dropout, from its generator.
at::Tensor lora_dropout(const at::Tensor& x, double p, const std::string& layer, int64_t column_offset,
                        int64_t total_columns);

// The keep mask alone, [samples, positions, columns] bool, as lora_dropout draws it (tests).
at::Tensor lora_dropout_keep(const DropoutDraw& draw, double p, const std::string& layer, int64_t samples,
                             int64_t positions, int64_t columns, int64_t column_offset, int64_t total_columns);

}  // namespace cadre
