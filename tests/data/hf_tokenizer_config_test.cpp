// What a model folder says about its tokenizer besides tokenizer.json: tokenizer_config.json's
// special tokens and chat template in the layouts transformers writes, generation_config.json's
// end-of-sequence ids, and errors that name the file and the field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/hf_tokenizer_config.h"

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cadre::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HfTokenizerConfig, ReadsTheLayoutsTransformersWrites) {
  const cadre::HfTokenizerConfig llama3 = cadre::hf_tokenizer_config_parse(
      R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": "{{ x }}"})", "t.json");
  EXPECT_EQ(llama3.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(llama3.eos_token, "<|eot_id|>");
  EXPECT_EQ(llama3.chat_template, "{{ x }}");
  // AddedToken objects (transformers 4), a null bos_token (Qwen), a list of named templates.
  const cadre::HfTokenizerConfig old = cadre::hf_tokenizer_config_parse(
      R"({"bos_token": null, "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false},
          "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})",
      "t.json");
  EXPECT_EQ(old.bos_token, "");
  EXPECT_EQ(old.eos_token, "</s>");
  EXPECT_EQ(old.chat_template, "D");
  EXPECT_EQ(cadre::hf_tokenizer_config_parse("{}", "t.json").chat_template, "");
}

TEST(HfTokenizerConfig, EosIdsAreOneOrAList) {
  EXPECT_EQ(cadre::hf_eos_token_ids_parse(R"({"eos_token_id": [128001, 128008, 128009]})", "g.json", 128256),
            (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(cadre::hf_eos_token_ids_parse(R"({"eos_token_id": 2})", "g.json", 32000), (std::vector<int>{2}));
  EXPECT_TRUE(cadre::hf_eos_token_ids_parse(R"({"eos_token_id": null})", "g.json", 10).empty());
  EXPECT_TRUE(cadre::hf_eos_token_ids_parse(R"({"do_sample": true})", "g.json", 10).empty());
}

TEST(HfTokenizerConfig, BadFilesAreRefusedNamingTheFileAndField) {
  EXPECT_NE(error_of([] { cadre::hf_tokenizer_config_parse("{", "dir/tokenizer_config.json"); })
                .find("dir/tokenizer_config.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::hf_tokenizer_config_parse(R"({"eos_token": 7})", "tc.json"); })
                .find("tc.json: field 'eos_token'"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::hf_tokenizer_config_parse(R"({"chat_template": [{"name": "x", "template": "y"}]})",
                                                           "tc.json"); })
                .find("'default'"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::hf_eos_token_ids_parse(R"({"eos_token_id": [1, 99]})", "gc.json", 50); })
                .find("gc.json: field 'eos_token_id[1]': token id 99 is outside the vocabulary of 50"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::hf_eos_token_ids_parse(R"({"eos_token_id": "2"})", "gc.json", 50); })
                .find("gc.json: field 'eos_token_id'"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::hf_eos_token_ids_parse("[1]", "gc.json", 50); }).find("not a JSON object"),
            std::string::npos);
}

}  // namespace
