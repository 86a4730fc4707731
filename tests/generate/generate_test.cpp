// Generation pieces: sampling (greedy, temperature, top-k, top-p, logit bias, repetition
// penalty, seeds), log-probabilities, incremental detokenization with stop sequences, and a
// sequence's finish reasons. The tokenizer is the tiny_model fixture's (512 BPE pieces with
// byte fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "data/tokenizer.h"
#include "generate/sampling.h"
#include "generate/sequence.h"
#include "generate/text_stream.h"

namespace {

std::string tokenizer_path() {
  const char* dir = std::getenv("CADRE_TINY_MODEL");
  return dir ? std::string(dir) + "/data/tokenizer.model" : "";
}

int64_t draw(const std::vector<float>& logits, const cadre::SamplingParams& p, cadre::Rng& rng,
             const std::vector<int>& history = {}) {
  std::vector<float> copy = logits;
  return cadre::sample_token(copy, p, history, rng);
}

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(Sampling, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  cadre::Rng rng(1);
  cadre::SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(draw({0.1f, 3.0f, -1.0f, 2.9f}, greedy, rng), 1);
  EXPECT_EQ(draw({1.0f, 5.0f, 5.0f, 2.0f}, greedy, rng), 1);
  cadre::SamplingParams top1;
  top1.top_k = 1;  // at temperature 1: still the argmax
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw({0.1f, 3.0f, -1.0f, 2.9f}, top1, rng), 1);
}

TEST(Sampling, DrawsFollowTheDistributionAndTheSeed) {
  const auto logits = logits_of({0.5, 0.3, 0.2});
  cadre::SamplingParams p;
  p.temperature = 1.0;
  cadre::Rng rng(42);
  std::map<int64_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[draw(logits, p, rng)];
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
  // One seed, one sequence of draws; another seed, another sequence.
  cadre::Rng a(7), b(7), c(8);
  std::vector<int64_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(draw(logits, p, a));
    db.push_back(draw(logits, p, b));
    dc.push_back(draw(logits, p, c));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  EXPECT_NE(cadre::sequence_seed(7, 0), cadre::sequence_seed(7, 1));
  // A low temperature sharpens the distribution.
  p.temperature = 0.25;
  int top = 0;
  for (int i = 0; i < 2000; ++i) top += draw(logits, p, rng) == 0;
  EXPECT_GT(top / 2000.0, 0.85);  // 0.5^4 / (0.5^4 + 0.3^4 + 0.2^4) = 0.87
}

TEST(Sampling, TopKTopPAndLogitBiasRestrictTheCandidates) {
  const auto logits = logits_of({0.5, 0.3, 0.15, 0.05});
  cadre::Rng rng(3);
  cadre::SamplingParams k2;
  k2.top_k = 2;
  cadre::SamplingParams p6;
  p6.top_p = 0.6;  // 0.5 is not enough, 0.5 + 0.3 is
  std::map<int64_t, int> seen_k, seen_p;
  for (int i = 0; i < 3000; ++i) {
    ++seen_k[draw(logits, k2, rng)];
    ++seen_p[draw(logits, p6, rng)];
  }
  EXPECT_EQ(seen_k.size(), 2u);
  EXPECT_EQ(seen_k.count(2) + seen_k.count(3), 0u);
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_EQ(seen_p.count(2) + seen_p.count(3), 0u);
  cadre::SamplingParams bias;
  bias.logit_bias = {{3, 100.0}};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(draw(logits, bias, rng), 3);
  bias.logit_bias = {{0, -100.0}};
  bias.temperature = 0;
  EXPECT_EQ(draw(logits, bias, rng), 1);
}

TEST(Sampling, RepetitionPenaltyDiscouragesTokensSeenBefore) {
  cadre::Rng rng(1);
  cadre::SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.5;
  EXPECT_EQ(draw({2.0f, 1.9f, -1.0f}, p, rng, {0}), 1);   // 2.0 / 1.5 < 1.9
  EXPECT_EQ(draw({-1.0f, -1.2f, -3.0f}, p, rng, {0}), 1);  // -1.0 * 1.5 < -1.2
  EXPECT_EQ(draw({2.0f, 1.9f, -1.0f}, p, rng, {2}), 0);   // untouched when 0 was not seen
}

TEST(Sampling, LogprobsAreTheLogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -4.0f};
  const cadre::LogprobResult r = cadre::token_logprobs(logits.data(), 4, 2, 3);
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  EXPECT_NEAR(r.chosen.logprob, 2.0 - std::log(total), 1e-9);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_EQ(r.top[2].token, 0);
}

class Detokenize : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tokenizer_path().empty()) << "CADRE_TINY_MODEL is not set (ctest fixture tiny_model)";
    tokenizer_ = cadre::tokenizer_load(tokenizer_path());
  }
  // The prompt and generated tokens of a text cut after `split` tokens.
  std::pair<std::vector<int>, std::vector<int>> split(const std::string& text, size_t at) {
    std::vector<int> ids = {tokenizer_->bos_id()};
    for (int id : tokenizer_->encode(text)) ids.push_back(id);
    return {{ids.begin(), ids.begin() + at}, {ids.begin() + at, ids.end()}};
  }
  std::string stream(const std::vector<int>& prompt, const std::vector<int>& gen, const std::vector<std::string>& stop,
                     bool* stopped = nullptr) {
    cadre::TextStream s(*tokenizer_, prompt, stop);
    std::string out;
    for (int t : gen) {
      const std::string piece = s.push(t);
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "a partial character was released";
      out += piece;
    }
    out += s.flush();
    if (stopped) *stopped = s.stopped();
    return out;
  }
  std::unique_ptr<cadre::Tokenizer> tokenizer_;
};

TEST_F(Detokenize, StreamedPiecesAddUpToTheDecodedTextWithItsSpaces) {
  const std::string text = "The Congress of the United States, in 1790: caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC and peace.";
  const auto all = split(text, 0).second;
  for (size_t at : {size_t{2}, size_t{4}, size_t{7}}) {
    auto [prompt, gen] = split(text, at);
    const std::string whole = tokenizer_->decode(all), before = tokenizer_->decode(prompt);
    ASSERT_EQ(whole.compare(0, before.size(), before), 0);
    EXPECT_EQ(stream(prompt, gen, {}), whole.substr(before.size())) << "split after " << at << " tokens";
  }
}

TEST_F(Detokenize, StopSequencesEndTheTextBeforeThem) {
  auto [prompt, gen] = split("We the People of the United States, in Order to form a more perfect Union", 3);
  const std::string full = stream(prompt, gen, {});
  bool stopped = false;
  const std::string cut = stream(prompt, gen, {"United St"}, &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(cut, full.substr(0, full.find("United St")));
  // The earliest of several; one that never appears changes nothing.
  EXPECT_EQ(stream(prompt, gen, {"form a", "People"}, &stopped), full.substr(0, full.find("People")));
  EXPECT_EQ(stream(prompt, gen, {"Unionx"}, &stopped), full);
  EXPECT_FALSE(stopped);  // "Union" was held back as a possible start of "Unionx", then released
}

TEST_F(Detokenize, SequencesFinishOnLengthEosAndContext) {
  const std::vector<int> prompt = {tokenizer_->bos_id(), 300, 301};
  std::vector<float> logits(512, 0.0f);
  auto pick = [&](int token) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[static_cast<size_t>(token)] = 10.0f;
    return logits.data();
  };
  cadre::GenerationParams p;
  p.sampling.temperature = 0;
  p.max_tokens = 3;
  cadre::Sequence by_length(*tokenizer_, prompt, p, 64, 1);
  by_length.mark_fed(3);
  for (int i = 0; i < 3; ++i) {
    auto step = by_length.accept(pick(400 + i), 512);
    EXPECT_EQ(step.finish, i == 2 ? cadre::Finish::Length : cadre::Finish::None);
    by_length.mark_fed(1);
  }
  EXPECT_EQ(by_length.generated_tokens(), 3);
  cadre::Sequence by_eos(*tokenizer_, prompt, p, 64, 1);
  by_eos.mark_fed(3);
  EXPECT_EQ(by_eos.accept(pick(tokenizer_->eos_id()), 512).finish, cadre::Finish::Stop);
  p.max_tokens = 100;
  cadre::Sequence by_context(*tokenizer_, prompt, p, 5, 1);  // room for 2 generated tokens
  by_context.mark_fed(3);
  EXPECT_EQ(by_context.accept(pick(400), 512).finish, cadre::Finish::None);
  by_context.mark_fed(1);
  EXPECT_EQ(by_context.accept(pick(401), 512).finish, cadre::Finish::Length);
  p.ignore_eos = true;
  cadre::Sequence past_eos(*tokenizer_, prompt, p, 64, 1);
  past_eos.mark_fed(3);
  EXPECT_EQ(past_eos.accept(pick(tokenizer_->eos_id()), 512).finish, cadre::Finish::None);
}

}  // namespace
