// `cadre generate`'s sampling flags end to end, from the command line to the tokens, on the
// tiny_model fixture's trained run (tests/generate/generate_test.cpp tests the sampler itself):
// each flag must reach the sampler, which shows as a property of the output that holds only if
// it did: --top-k 1 and a tiny --top-p leave only the argmax, so they equal --greedy at any
// temperature and seed; a seed repeats its draw and another seed draws otherwise; an enormous
// --repetition-penalty never repeats a token; --stop ends the text before its first occurrence.
// Bad values exit 2 naming the flag.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/process.h"

namespace {

using nlohmann::json;

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fixture = std::getenv("CADRE_TINY_MODEL");
    ASSERT_TRUE(fixture) << "CADRE_TINY_MODEL is not set (ctest fixture tiny_model)";
    fixture_ = fixture;
  }

  // The --json output of `cadre generate` with these extra flags (24 tokens, EOS ignored).
  json generate(const std::vector<std::string>& flags, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {CADRE_BIN, "generate", "--model", fixture_ + "/run", "--tokenizer",
                                     fixture_ + "/data/tokenizer.model", "--prompt", "The state of the Union is",
                                     "--max-tokens", "24", "--ignore-eos", "--json", "--quiet"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = cadre::test::run_process(argv, env, 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t brace = r.output.find('{');
    if (r.exit_code != 0 || brace == std::string::npos) return json::object();
    return json::parse(r.output.substr(brace));
  }

  cadre::test::RunResult refused(const std::vector<std::string>& flags, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {CADRE_BIN, "generate", "--model", fixture_ + "/run", "--prompt", "x"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return cadre::test::run_process(argv, env, 60);
  }

  std::string fixture_;
};

std::vector<int64_t> tokens(const json& out) { return out.value("tokens", std::vector<int64_t>{}); }

TEST_F(GenerateCli, TopKOneAndATinyTopPLeaveOnlyTheArgmax) {
  const auto greedy = tokens(generate({"--greedy"}));
  ASSERT_EQ(greedy.size(), 24u);
  EXPECT_EQ(tokens(generate({"--temperature", "0"})), greedy);
  EXPECT_EQ(tokens(generate({"--temperature", "1.5", "--top-k", "1", "--seed", "11"})), greedy);
  EXPECT_EQ(tokens(generate({"--temperature", "1.5", "--top-p", "1e-6", "--seed", "12"})), greedy);
  // Without the restriction the same temperature and seed sample something else.
  EXPECT_NE(tokens(generate({"--temperature", "1.5", "--seed", "11"})), greedy);
}

TEST_F(GenerateCli, ASeedRepeatsItsDrawAndAnotherSeedDrawsOtherwise) {
  const std::vector<std::string> sampling = {"--temperature", "1.2", "--top-k", "50", "--top-p", "0.95"};
  auto with_seed = [&](const char* seed) {
    auto flags = sampling;
    flags.insert(flags.end(), {"--seed", seed});
    return generate(flags);
  };
  const json a = with_seed("7"), again = with_seed("7"), other = with_seed("8");
  EXPECT_EQ(a.value("seed", 0), 7);
  ASSERT_EQ(tokens(a).size(), 24u);
  EXPECT_EQ(tokens(a), tokens(again));
  // 24 draws at temperature 1.2 over the top 50: two seeds agreeing on all is not a real chance.
  EXPECT_NE(tokens(a), tokens(other));
}

TEST_F(GenerateCli, AnEnormousRepetitionPenaltyNeverRepeatsAToken) {
  const json plain = generate({"--greedy"});
  const auto prompt = plain.value("prompt_tokens", std::vector<int64_t>{});
  const auto repeats = [&](const std::vector<int64_t>& out) {
    std::set<int64_t> seen(prompt.begin(), prompt.end());
    for (int64_t t : out)
      if (!seen.insert(t).second) return true;
    return false;
  };
  // The premise: this small model's greedy text repeats itself (else the penalty shows nothing).
  ASSERT_TRUE(repeats(tokens(plain))) << plain.dump();
  const json penalised = generate({"--greedy", "--repetition-penalty", "1e6"});
  ASSERT_EQ(tokens(penalised).size(), 24u);
  EXPECT_FALSE(repeats(tokens(penalised))) << penalised.dump();
}

TEST_F(GenerateCli, StopEndsTheTextBeforeItsFirstOccurrence) {
  const std::string text = generate({"--greedy"}).value("text", "");
  ASSERT_GT(text.size(), 12u) << text;
  // A stop string from the middle of the greedy text, cut where it first appears.
  const std::string stop = text.substr(text.size() / 2, 3);
  const json stopped = generate({"--greedy", "--stop", "no such text", "--stop", stop});
  EXPECT_EQ(stopped.value("text", ""), text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped.value("finish_reason", ""), "stop");
}

TEST_F(GenerateCli, BadSamplingValuesExit2NamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--temperature", "-1"}, "--temperature"}, {{"--top-k", "-3"}, "--top-k"},
      {{"--top-p", "0"}, "--top-p"},             {{"--top-p", "1.5"}, "--top-p"},
      {{"--repetition-penalty", "0"}, "--repetition-penalty"}, {{"--seed", "abc"}, "--seed"},
  };
  for (const auto& [flags, name] : cases) {
    auto r = refused(flags);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << " " << flags[1] << ": " << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << r.output;
  }
}

// With no GPU visible (CUDA_VISIBLE_DEVICES empty hides every one, on any machine): --device
// cpu is today's decoder, auto falls back to it, and cuda is refused naming the flag and what
// is missing (a build without CUDA, or no visible device).
TEST_F(GenerateCli, DeviceCpuAndAutoKeepTheGreedyTokensAndCudaWithoutAGpuExits2) {
  const std::vector<std::string> no_gpu = {"CUDA_VISIBLE_DEVICES="};
  const json plain = generate({"--greedy"});
  ASSERT_EQ(tokens(plain).size(), 24u);
  EXPECT_EQ(plain.value("device", ""), "cpu");
  EXPECT_EQ(tokens(generate({"--greedy", "--device", "cpu"})), tokens(plain));
  const json automatic = generate({"--greedy", "--device", "auto"}, no_gpu);
  EXPECT_EQ(automatic.value("device", ""), "cpu");
  EXPECT_EQ(tokens(automatic), tokens(plain));
  auto cuda = refused({"--device", "cuda"}, no_gpu);
  EXPECT_EQ(cuda.exit_code, 2) << cuda.output;
  EXPECT_NE(cuda.output.find("--device: cuda was asked for, but"), std::string::npos) << cuda.output;
  EXPECT_NE(cuda.output.find("or use cpu"), std::string::npos) << cuda.output;
  auto bad = refused({"--device", "tpu"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device: 'tpu' is not a device"), std::string::npos) << bad.output;
}

}  // namespace
