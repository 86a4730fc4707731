// Prefill, then decode until the sequence finishes.
#include "generate/generator.h"

#include <chrono>

#include "core/clock.h"

namespace cadre {

GenerationStats generate_sequence(Decoder& decoder, int64_t slot, Sequence& sequence,
                                  const std::function<void(const StepResult&)>& on_step) {
  using Clock = std::chrono::steady_clock;
  decoder.reset(slot);
  GenerationStats stats;
  stats.prompt_tokens = sequence.prompt_tokens();
  const auto t0 = Clock::now();
  auto t_first = t0;
  while (!sequence.finished()) {
    const std::vector<int> tokens = sequence.pending_tokens(decoder.max_len());
    std::vector<DecodeRow> rows;
    for (size_t i = 0; i < tokens.size(); ++i) rows.push_back({slot, tokens[i], i + 1 == tokens.size()});
    at::Tensor logits = decoder.forward(rows);
    sequence.mark_fed(static_cast<int64_t>(tokens.size()));
    StepResult step = sequence.accept(logits.data_ptr<float>(), logits.size(1));
    if (sequence.generated_tokens() == 1) t_first = Clock::now();
    on_step(step);
  }
  stats.generated_tokens = sequence.generated_tokens();
  stats.prefill_s = std::chrono::duration<double>(t_first - t0).count();
  stats.decode_s = seconds_since(t_first);
  return stats;
}

}  // namespace cadre
