// Sampling: the logits processors in the order Hugging Face and vLLM apply them.
#include "generate/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/error.h"

namespace cadre {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t sequence_seed(uint64_t seed, int64_t index) {
  Rng mix(seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(index + 1)));
  return mix.next();
}

int64_t sample_token(std::vector<float>& logits, const SamplingParams& p, const std::vector<int>& history, Rng& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  for (const auto& [token, bias] : p.logit_bias)
    if (token >= 0 && token < V) logits[static_cast<size_t>(token)] += static_cast<float>(bias);
  if (p.repetition_penalty != 1.0) {
    const float penalty = static_cast<float>(p.repetition_penalty);
    std::unordered_set<int> seen(history.begin(), history.end());
    for (int t : seen) {
      if (t < 0 || t >= V) continue;
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0 ? l / penalty : l * penalty;
    }
  }
  if (p.temperature <= 0 || p.top_k == 1) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    return best;
  }
  // Candidates by logit, highest first, lowest id first among equals: a total order, so the
  // draw is reproducible.
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto higher = [&](int64_t a, int64_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  int64_t keep = V;
  if (p.top_k > 0 && p.top_k < V) {
    keep = p.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  } else {
    std::sort(order.begin(), order.end(), higher);
  }
  // Softmax of logits / temperature over the kept ones, in double.
  std::vector<double> prob(static_cast<size_t>(keep));
  const double top = logits[static_cast<size_t>(order[0])] / p.temperature;
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) {
    const float l = logits[static_cast<size_t>(order[static_cast<size_t>(i)])];
    prob[static_cast<size_t>(i)] = std::isinf(l) && l < 0 ? 0.0 : std::exp(l / p.temperature - top);
    total += prob[static_cast<size_t>(i)];
  }
  if (p.top_p < 1.0) {
    double mass = 0;
    int64_t n = 0;
    while (n < keep && (n == 0 || mass < p.top_p * total)) mass += prob[static_cast<size_t>(n++)];
    keep = n;
    total = mass;
  }
  double u = rng.uniform() * total;
  for (int64_t i = 0; i < keep; ++i) {
    u -= prob[static_cast<size_t>(i)];
    if (u < 0) return order[static_cast<size_t>(i)];
  }
  // Rounding left u a hair above zero: the last candidate with any probability.
  for (int64_t i = keep - 1; i >= 0; --i)
    if (prob[static_cast<size_t>(i)] > 0) return order[static_cast<size_t>(i)];
  return order[0];
}

LogprobResult token_logprobs(const float* logits, int64_t V, int64_t chosen, int64_t top) {
  double m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) m = std::max(m, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - m);
  const double lse = m + std::log(sum);
  LogprobResult out;
  out.chosen = {chosen, double(logits[chosen]) - lse};
  top = std::min(top, V);
  if (top > 0) {
    std::vector<int64_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < top; ++i) out.top.push_back({order[static_cast<size_t>(i)], double(logits[order[static_cast<size_t>(i)]]) - lse});
  }
  return out;
}

}  // namespace cadre
