// Hugging Face config.json -> Cadre's model keys (models/llama/hf_adapter): RoPE's base read
// from either spelling transformers writes (a top-level rope_theta before transformers 5,
// rope_parameters from 5 on), never defaulted when one is there; Llama 3.1's and linear RoPE
// scaling read the same from either spelling; conflicts, scalings Cadre lacks and parameters it
// does not know refused with the field named. The model keys' own checks of the scaling.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/torch_compat.h"
#include "models/llama/config.h"
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

  json dynamic = tiny_llama();
  dynamic["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 500000.0}, {"factor", 2.0}};
  m = refusal(dynamic);
  EXPECT_NE(m.find("rope_parameters.rope_type = \"dynamic\" is not supported"), std::string::npos) << m;

  json no_theta = tiny_llama();
  no_theta["rope_parameters"] = {{"rope_type", "default"}};
  m = refusal(no_theta);
  EXPECT_NE(m.find("rope_parameters.rope_theta is missing"), std::string::npos) << m;

  json text = tiny_llama();
  text["rope_theta"] = "1e4";
  m = refusal(text);
  EXPECT_NE(m.find("rope_theta = \"1e4\" is not a number"), std::string::npos) << m;
}

json llama31(bool hub_spelling) {
  json c = tiny_llama();
  json rope = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
               {"original_max_position_embeddings", 8192}};
  if (hub_spelling) {
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = rope;
  } else {
    rope["rope_theta"] = 500000.0;
    c["rope_parameters"] = rope;
  }
  return c;
}

std::vector<std::string> rope_values(const json& config) {
  const cadre::ModelSection s = cadre::llama_section_from_hf(config.dump(), "config.json");
  std::vector<std::string> out;
  for (const char* k : {"rope_theta", "rope_scaling", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                        "rope_original_max_seq_len"})
    out.push_back(s.value(k));
  return out;
}

TEST(HfConfig, Llama31RopeScalingReadsTheSameFromEitherSpelling) {
  const auto hub = rope_values(llama31(true)), v5 = rope_values(llama31(false));
  EXPECT_EQ(hub, v5);
  EXPECT_EQ(hub[1], "llama3");
  EXPECT_EQ(std::stod(hub[0]), 500000.0);
  EXPECT_EQ(std::stod(hub[2]), 8.0);
  EXPECT_EQ(std::stoll(hub[5]), 8192);
  // Older configs spell the type "type"; linear needs only the factor.
  json linear = tiny_llama();
  linear["rope_theta"] = 10000.0;
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const cadre::LlamaConfig m = cadre::llama_config(cadre::llama_section_from_hf(linear.dump(), "config.json"));
  EXPECT_EQ(m.rope_scaling, "linear");
  EXPECT_EQ(m.rope_factor, 2.0);
}

TEST(HfConfig, IncompleteOrUnknownRopeScalingIsRefusedNamingTheField) {
  json missing = llama31(true);
  missing["rope_scaling"].erase("high_freq_factor");
  std::string m = refusal(missing);
  EXPECT_NE(m.find("rope_scaling.high_freq_factor is missing"), std::string::npos) << m;

  json unknown = llama31(false);
  unknown["rope_parameters"]["attention_factor"] = 0.5;
  m = refusal(unknown);
  EXPECT_NE(m.find("rope_parameters.attention_factor = 0.5 is not supported"), std::string::npos) << m;

  json no_theta = llama31(true);
  no_theta.erase("rope_theta");
  m = refusal(no_theta);
  EXPECT_NE(m.find("rope_theta is missing; rope_type \"llama3\" needs"), std::string::npos) << m;

  json disagree = llama31(true);
  disagree["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 4.0},
                                 {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}};
  m = refusal(disagree);
  EXPECT_NE(m.find("rope_scaling.factor = 8.0 and rope_parameters.factor = 4.0 disagree"), std::string::npos) << m;
}

TEST(LlamaConfig, RopeScalingKeysAreChecked) {
  auto refused = [](std::vector<std::pair<std::string, std::string>> keys) -> std::string {
    cadre::ModelSection s;
    s.arch = "llama";
    for (const auto& [k, v] : keys) s.keys.push_back({"model." + k, v, "test.yaml"});
    try {
      cadre::llama_config(s);
    } catch (const cadre::ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(refused({{"rope_scaling", "llama3"}, {"rope_factor", "8"}}), "(accepted)");
  EXPECT_NE(refused({{"rope_scaling", "yarn"}}).find("model.rope_scaling = 'yarn' is not one of none, linear, llama3"),
            std::string::npos);
  EXPECT_NE(refused({{"rope_factor", "2"}}).find("has no effect with model.rope_scaling none"), std::string::npos);
  EXPECT_NE(refused({{"rope_scaling", "linear"}, {"rope_factor", "0.5"}}).find("must be >= 1"), std::string::npos);
  EXPECT_NE(refused({{"rope_scaling", "llama3"}, {"rope_factor", "8"}, {"rope_high_freq_factor", "1"}})
                .find("must exceed model.rope_low_freq_factor"),
            std::string::npos);
}

}  // namespace

TEST(LlamaConfig, AttentionKeyIsCheckedAndPicksSdpaOnlyWhereLibtorchHasIt) {
  auto parsed = [](const std::string& value) -> std::string {
    cadre::ModelSection s;
    s.keys.push_back({"model.attention", value, "test.yaml"});
    try {
      return cadre::llama_config(s).attention;
    } catch (const cadre::ConfigError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(parsed("auto"), "auto");
  EXPECT_EQ(parsed("math"), "math");
  EXPECT_NE(parsed("flash").find("model.attention = 'flash' is not one of auto, math, sdpa"), std::string::npos);
  cadre::LlamaConfig m;
  m.attention = "math";
  EXPECT_FALSE(cadre::llama_uses_sdpa(m, true));
#if CADRE_TORCH_HAS_SDPA
  EXPECT_EQ(parsed("sdpa"), "sdpa");
  m.attention = "auto";
  EXPECT_TRUE(cadre::llama_uses_sdpa(m, /*device_is_cuda=*/true));
  EXPECT_FALSE(cadre::llama_uses_sdpa(m, /*device_is_cuda=*/false));
  m.attention = "sdpa";
  EXPECT_TRUE(cadre::llama_uses_sdpa(m, false));
#else
  EXPECT_NE(parsed("sdpa").find("model.attention = 'sdpa' needs libtorch 2.x"), std::string::npos) << parsed("sdpa");
  m.attention = "auto";
  EXPECT_FALSE(cadre::llama_uses_sdpa(m, true));
#endif
}
