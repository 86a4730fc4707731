// Instruction and chat samples: the JSONL shapes and their errors, and the ids and learned tokens
// of each shape equal to what transformers gives for a Llama 3-style tokenizer.json folder with
// Llama 3.1's chat template (tests/python/instruct_labels_ref.py writes both).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "instruct/labelled_tokens.h"
#include "support/process.h"

namespace {

using cadre::InstructionSample;
using json = nlohmann::json;

std::string error_of(const std::string& line) {
  try {
    cadre::instruction_sample_parse(line, "d.jsonl:7");
  } catch (const cadre::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InstructionSample, EachShapeIsReadByItsKeys) {
  EXPECT_EQ(cadre::instruction_sample_parse(R"({"text": "a b"})", "x").text, "a b");
  const InstructionSample pc = cadre::instruction_sample_parse(R"({"prompt": "Q:", "completion": " A"})", "x");
  EXPECT_EQ(pc.kind, InstructionSample::Kind::PromptCompletion);
  EXPECT_EQ(pc.completion, " A");
  const InstructionSample alpaca =
      cadre::instruction_sample_parse(R"({"instruction": "Do", "input": "this", "output": "done"})", "x");
  ASSERT_EQ(alpaca.kind, InstructionSample::Kind::Chat);
  ASSERT_EQ(alpaca.messages.size(), 2u);
  EXPECT_EQ(alpaca.messages[0].content, "Do\n\nthis");
  EXPECT_EQ(alpaca.messages[1].role, "assistant");
  EXPECT_EQ(cadre::instruction_sample_parse(R"({"instruction": "Do", "output": "done"})", "x").messages[0].content, "Do");
  const InstructionSample chat = cadre::instruction_sample_parse(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                       {"role": "assistant", "content": "A"}]})", "x");
  EXPECT_EQ(chat.messages.size(), 3u);
}

TEST(InstructionSample, BadLinesNameTheLineAndWhatIsWrong) {
  EXPECT_NE(error_of("{").find("d.jsonl:7: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("d.jsonl:7: a line must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"txt": "a"})").find("expected 'text'"), std::string::npos);
  EXPECT_NE(error_of(R"({"text": 5})").find("field 'text' must be a string"), std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a"})").find("field 'completion' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"conversations": []})").find("ShareGPT"), std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})").find("messages[0]: role 'robot'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "x"}]})").find("no assistant message"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "s"},
                                      {"role": "assistant", "content": "a"}]})")
                .find("messages[1]: a system message may only come first"),
            std::string::npos);
}

class LabelledTokens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("instruct");
    const auto r = cadre::test::run_process(
        {CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/instruct_labels_ref.py", dir_->path()}, {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* LabelledTokens::dir_ = nullptr;

TEST_F(LabelledTokens, EqualTransformersForEveryShape) {
  const auto tokenizer = cadre::tokenizer_load(dir_->path());
  const cadre::ChatTemplate chat = cadre::ChatTemplate::load("", *tokenizer);
  EXPECT_NE(chat.name().find("chat_template.jinja"), std::string::npos) << chat.name();
  const json cases = json::parse(cadre::file_read(dir_->path() + "/expected.json"));
  ASSERT_EQ(cases.size(), 6u);
  for (const json& c : cases) {
    const std::string line = c["line"];
    const cadre::LabelledTokens got =
        cadre::labelled_tokens(cadre::instruction_sample_parse(line, "case"), *tokenizer, chat, false);
    EXPECT_EQ(got.ids, c["ids"].get<std::vector<int>>()) << line;
    EXPECT_EQ(got.learn, c["learn"].get<std::vector<uint8_t>>()) << line;
    const cadre::LabelledTokens all =
        cadre::labelled_tokens(cadre::instruction_sample_parse(line, "case"), *tokenizer, chat, true);
    EXPECT_EQ(all.ids, got.ids) << line;
    EXPECT_EQ(std::count(all.learn.begin(), all.learn.end(), 1), static_cast<long>(all.ids.size())) << line;
  }
  // What is learned of a one-turn chat is the answer and the end of the turn: "Hello" and <|eot_id|>.
  const cadre::LabelledTokens one = cadre::labelled_tokens(
      cadre::instruction_sample_parse(cases[0]["line"].get<std::string>(), "case"), *tokenizer, chat, false);
  std::vector<int> learned;
  for (size_t i = 0; i < one.ids.size(); ++i)
    if (one.learn[i]) learned.push_back(one.ids[i]);
  ASSERT_EQ(learned.size(), 2u);
  EXPECT_EQ(tokenizer->decode({learned[0]}), "Hello");
  EXPECT_EQ(learned[1], tokenizer->eos_ids().back());  // <|eot_id|>, from generation_config.json
}

}  // namespace
