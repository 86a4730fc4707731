// Choosing the next token from a sequence's logits: logit bias, repetition penalty,
// temperature, top-k, top-p, then a draw from the sequence's own random stream (or the argmax
// when the temperature is 0). The stream belongs to the sequence alone, so what it draws does
// not depend on which other sequences run beside it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cadre {

struct SamplingParams {
  double temperature = 1.0;         // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;                // 0: no limit
  double top_p = 1.0;               // nucleus: smallest set of tokens with at least this mass
  double repetition_penalty = 1.0;  // > 1 discourages tokens already in the prompt or output (CTRL / HF rule)
  std::map<int64_t, double> logit_bias;  // added to the logits first (OpenAI's -100..100)
  uint64_t seed = 0;
};

// SplitMix64: a small generator whose output is fixed by its definition on every platform
// (std::uniform_*_distribution is not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t state_;
};

// The seed of sequence `index` of a request seeded with `seed` (n > 1 choices differ).
uint64_t sequence_seed(uint64_t seed, int64_t index);

// Picks the next token. `logits` (vocab entries) is modified in place; `history` holds the
// prompt and the tokens generated so far (for the repetition penalty).
int64_t sample_token(std::vector<float>& logits, const SamplingParams& params, const std::vector<int>& history, Rng& rng);

// Log-probabilities of the model's distribution (log-softmax of the raw logits): the chosen
// token's and the `top` most likely ones, highest first.
struct TokenLogprob {
  int64_t token = 0;
  double logprob = 0;
};
struct LogprobResult {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};
LogprobResult token_logprobs(const float* logits, int64_t vocab, int64_t chosen, int64_t top);

}  // namespace cadre
