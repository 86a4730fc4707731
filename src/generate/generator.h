// The token loop for one sequence (`cadre generate`): feed the prompt, then one token per
// step, handing each step's result to the caller (who streams its text).
#pragma once

#include <cstdint>
#include <functional>

#include "generate/sequence.h"
#include "models/model.h"

namespace cadre {

struct GenerationStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_s = 0;  // prompt in, first token out
  double decode_s = 0;   // the rest
};

// Runs `sequence` to its end in `slot` of the decoder (reset first).
GenerationStats generate_sequence(Decoder& decoder, int64_t slot, Sequence& sequence,
                                  const std::function<void(const StepResult&)>& on_step);

}  // namespace cadre
