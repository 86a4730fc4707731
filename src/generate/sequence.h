// One sequence being generated: its tokens (prompt, then generated), how many of them the
// decoder has cached, its sampling stream, its text so far and why it finished. The token
// loop (generator.h) and the server's scheduler (serve/scheduler.h) drive it the same way:
// feed pending_tokens() to the decoder, pass the last row's logits to accept().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "generate/sampling.h"
#include "generate/text_stream.h"

namespace cadre {

struct GenerationParams {
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t logprobs = -1;  // -1: none; k >= 0: the chosen token's and the k most likely ones
};

enum class Finish { None, Stop, Length };
const char* finish_reason(Finish finish);  // "stop", "length" (OpenAI's names)

struct StepResult {
  int64_t token = 0;
  std::string text;  // text that became final with this token (may be empty)
  std::optional<LogprobResult> logprob;
  Finish finish = Finish::None;
};

class Sequence {
 public:
  // `context` is the most tokens (prompt + generated) the decoder's cache holds.
  Sequence(const Tokenizer& tokenizer, std::vector<int> prompt, GenerationParams params, int64_t context, uint64_t seed);

  // Tokens the decoder has not seen yet, at most `limit`: the prompt in chunks, then the
  // last token sampled. mark_fed(n) after they went in.
  std::vector<int> pending_tokens(int64_t limit) const;
  void mark_fed(int64_t n) { fed_ += n; }
  // Whether the decoder has everything, so the next forward's last row gives the logits.
  bool prompt_done(int64_t fed_after) const { return fed_after >= static_cast<int64_t>(tokens_.size()); }

  // Samples from the logits of the last fed position and decides whether the sequence ends.
  StepResult accept(const float* logits, int64_t vocab);

  bool finished() const { return finish_ != Finish::None; }
  Finish finish() const { return finish_; }
  int64_t prompt_tokens() const { return prompt_len_; }
  int64_t generated_tokens() const { return static_cast<int64_t>(tokens_.size()) - prompt_len_; }
  int64_t fed() const { return fed_; }
  std::vector<int> generated() const { return {tokens_.begin() + prompt_len_, tokens_.end()}; }
  const std::string& text() const { return stream_.emitted(); }

 private:
  const Tokenizer& tokenizer_;
  std::vector<int> tokens_;
  int64_t prompt_len_ = 0;
  int64_t fed_ = 0;
  GenerationParams params_;
  int64_t context_;
  std::vector<int> eos_;  // any of them ends the sequence
  int64_t tokenizer_vocab_;
  Rng rng_;
  TextStream stream_;
  Finish finish_ = Finish::None;
  std::vector<float> scratch_;
};

}  // namespace cadre
