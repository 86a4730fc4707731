// Hugging Face config.json -> Cadre's model keys (models/llama/hf_adapter): RoPE's base read
// from either spelling transformers writes (a top-level rope_theta before transformers 5,
// rope_parameters from 5 on), never defaulted when one is there, and conflicts or RoPE
// scalings Cadre lacks refused with the field named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/llama/hf_adapter.h"

namespace {

using nlohmann::json;

json tiny_llama() {
  return {{"model_type", "llama"},         {"hidden_size", 64},       {"num_hidden_layers", 2},
          {"num_attention_heads", 4},      {"num_key_value_heads", 2}, {"vocab_size", 256},
          {"intermediate_size", 168},      {"rms_norm_eps", 1e-6}};
}

std::string rope_theta(const json& config) {
  return cadre::llama_section_from_hf(config.dump(), "config.json").value("rope_theta");
}

std::string refusal(const json& config) {
  try {
    cadre::llama_section_from_hf(config.dump(), "config.json");
  } catch (const cadre::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(HfConfig, RopeThetaIsReadFromEitherSpelling) {
  json v4 = tiny_llama();
  v4["rope_theta"] = 500000.0;
  EXPECT_EQ(std::stod(rope_theta(v4)), 500000.0);
  json v5 = tiny_llama();
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  EXPECT_EQ(std::stod(rope_theta(v5)), 500000.0);
  json both = v5;
  both["rope_theta"] = 500000.0;
  EXPECT_EQ(std::stod(rope_theta(both)), 500000.0);
  // Neither: transformers' own default.
  EXPECT_EQ(std::stod(rope_theta(tiny_llama())), 10000.0);
}

TEST(HfConfig, ConflictingOrScaledRopeIsRefusedNamingTheField) {
  json both = tiny_llama();
  both["rope_theta"] = 10000.0;
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  std::string m = refusal(both);
  EXPECT_NE(m.find("disagree"), std::string::npos) << m;
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;

  json llama3 = tiny_llama();
  llama3["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}};
  m = refusal(llama3);
  EXPECT_NE(m.find("rope_parameters.rope_type = \"llama3\" is not supported"), std::string::npos) << m;

  json no_theta = tiny_llama();
  no_theta["rope_parameters"] = {{"rope_type", "default"}};
  m = refusal(no_theta);
  EXPECT_NE(m.find("rope_parameters has no numeric rope_theta"), std::string::npos) << m;

  json text = tiny_llama();
  text["rope_theta"] = "1e4";
  m = refusal(text);
  EXPECT_NE(m.find("rope_theta = \"1e4\" is not a number"), std::string::npos) << m;
}

}  // namespace
