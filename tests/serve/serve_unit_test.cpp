// The server's pieces without a server: OpenAI request parsing (defaults, types, ranges,
// refused fields named), chat templates rendered to token ids, response and chunk shapes,
// the Prometheus histogram, and the KV-cache budget (--kv-cache-memory) in the decoder's blocks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "data/tokenizer.h"
#include "models/llama/decode.h"
#include "models/llama/model.h"
#include "chat/chat_template.h"
#include "serve/kv_cache_budget.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "support/process.h"

namespace {

using json = nlohmann::json;

std::string param_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cadre::ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    return e.param.empty() ? "(none)" : e.param;
  }
  return "(accepted)";
}

TEST(OpenAiRequest, CompletionDefaultsAndFields) {
  auto r = cadre::parse_completion_request(R"({"model": "m", "prompt": "hi"})", 32);
  EXPECT_EQ(r.params.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seeded);
  EXPECT_EQ(r.params.logprobs, -1);
  r = cadre::parse_completion_request(
      R"({"model": "m", "prompt": ["hi"], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "n": 4,
          "stop": ["a", "b"], "seed": 9, "logit_bias": {"17": -100, "3": 2.5}, "logprobs": 2, "stream": true,
          "stream_options": {"include_usage": true}, "user": "u", "presence_penalty": 0, "repetition_penalty": 1.2})",
      32);
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_EQ(r.params.sampling.temperature, 0);
  EXPECT_EQ(r.params.sampling.top_p, 0.5);
  EXPECT_EQ(r.params.sampling.top_k, 3);
  EXPECT_EQ(r.params.sampling.repetition_penalty, 1.2);
  EXPECT_EQ(r.n, 4);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.params.sampling.seed, 9u);
  EXPECT_EQ(r.params.sampling.logit_bias.at(17), -100);
  EXPECT_EQ(r.params.sampling.logit_bias.at(3), 2.5);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  r = cadre::parse_completion_request(R"({"model": "m", "prompt": [1, 5, 9]})", 32);
  EXPECT_EQ(r.prompt_token_ids, (std::vector<int>{1, 5, 9}));
}

TEST(OpenAiRequest, BadFieldsAreNamed) {
  auto completion = [](const std::string& body) { return [body] { cadre::parse_completion_request(body, 8); }; };
  auto chat = [](const std::string& body) { return [body] { cadre::parse_chat_request(body, 8); }; };
  EXPECT_EQ(param_of(completion("not json")), "(none)");
  EXPECT_EQ(param_of(completion(R"({"prompt": "x"})")), "model");
  EXPECT_EQ(param_of(completion(R"({"model": "m"})")), "prompt");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "n": 9})")), "n");  // above the batch
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "top_p": 0})")), "top_p");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "stop": ["a","b","c","d","e"]})")), "stop");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "logit_bias": {"x": 1}})")), "logit_bias");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "logit_bias": {"1": 101}})")), "logit_bias");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "frequency_penalty": 0.5})")), "frequency_penalty");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "echo": true})")), "echo");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "suffix": "y"})")), "suffix");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "suffix": null})")), "(accepted)");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": ["a", "b"]})")), "prompt");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})")),
            "stream_options");
  EXPECT_EQ(param_of(completion(R"({"model": "m", "prompt": "x", "seed": "1"})")), "seed");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": []})")), "messages");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": [{"role": "user"}]})")), "messages[0].content");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x", "extra": 1}]})")),
            "messages[0].extra");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")),
            "top_logprobs");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "response_format": {"type": "json_object"}})")), "response_format");
  EXPECT_EQ(param_of(chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "functions": []})")),
            "functions");
}

TEST(OpenAiRequest, ChatMessagesAndOptions) {
  auto r = cadre::parse_chat_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}], "name": "ann"}],
          "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3, "response_format": {"type": "text"}})", 8);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "hello");
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(cadre::parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", 8).params.max_tokens,
            -1);  // chat: the rest of the context, decided by the server
}

class ChatTemplates : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("CADRE_TINY_MODEL");
    ASSERT_TRUE(dir) << "CADRE_TINY_MODEL is not set (ctest fixture tiny_model)";
    tokenizer_ = cadre::tokenizer_load(std::string(dir) + "/data/tokenizer.model");
  }
  std::vector<int> ids(const std::string& text) const { return tokenizer_->encode(text); }
  std::unique_ptr<cadre::Tokenizer> tokenizer_;
};

TEST_F(ChatTemplates, Llama2AsMetasReferenceEncodesADialog) {
  // A tokenizer without a template of its own gets the built-in llama2 (Llama 2 chat's own
  // template): <s> and </s> are the BOS and EOS ids, each turn's text encoded on its own.
  const cadre::ChatTemplate t = cadre::ChatTemplate::load("", *tokenizer_);
  EXPECT_EQ(t.name(), "llama2");
  const std::vector<cadre::ChatMessage> dialog = {
      {"system", "Be brief."}, {"user", "Hi there "}, {"assistant", " Hello."}, {"user", "And now?"}};
  std::vector<int> want = {tokenizer_->bos_id()};
  for (int id : ids("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello. ")) want.push_back(id);
  want.push_back(tokenizer_->eos_id());
  want.push_back(tokenizer_->bos_id());
  for (int id : ids("[INST] And now? [/INST]")) want.push_back(id);
  EXPECT_EQ(t.render(dialog, *tokenizer_), want);
  // The template's own refusal, in its words as transformers raises it (serve answers 400).
  try {
    t.render({{"user", "a"}, {"user", "b"}}, *tokenizer_);
    ADD_FAILURE() << "two user turns in a row were rendered";
  } catch (const cadre::ChatRefused& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
  EXPECT_THROW(t.render({{"system", "a"}}, *tokenizer_), cadre::ChatRefused);  // renders to nothing
}

TEST_F(ChatTemplates, TemplateFilesAndChatml) {
  cadre::test::TempDir dir("chat-template");
  // A newline after a block tag is dropped (transformers renders with trim_blocks): '\n' is written.
  cadre::test::write_text(dir / "t.jinja",
                          "{{ bos_token }}{% for m in messages %}{{ m.role[0] | upper }}: {{ m.content }}{% if m.role == "
                          "'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}");
  const cadre::ChatTemplate t = cadre::ChatTemplate::load(dir / "t.jinja", *tokenizer_);
  EXPECT_EQ(t.render_text({{"system", "sys"}, {"user", "hi"}, {"assistant", "yo"}}, *tokenizer_),
            "<s>S: sys\nU: hi\nA: yo</s>\nA:");
  std::vector<int> want = {tokenizer_->bos_id()};
  for (int id : ids("S: sys\nU: hi\nA: yo")) want.push_back(id);
  want.push_back(tokenizer_->eos_id());
  for (int id : ids("\nA:")) want.push_back(id);
  EXPECT_EQ(t.render({{"system", "sys"}, {"user", "hi"}, {"assistant", "yo"}}, *tokenizer_), want);
  // chatml's markers are not in this SentencePiece vocabulary: they are text.
  EXPECT_EQ(cadre::ChatTemplate::load("chatml", *tokenizer_).render({{"user", "hi"}}, *tokenizer_),
            ids("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
  cadre::test::write_text(dir / "bad.jinja", "{% for m in messages %}{{ m.content }}");
  try {
    cadre::ChatTemplate::load(dir / "bad.jinja", *tokenizer_);
    ADD_FAILURE() << "an unclosed for block was accepted";
  } catch (const cadre::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jinja"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cadre::ChatTemplate::load("mistral", *tokenizer_), cadre::ConfigError);
}

TEST_F(ChatTemplates, ResponsesAndChunksHaveOpenAiShapes) {
  cadre::SequenceEvent first{0, {}}, last{1, {}};
  first.step.text = " Hello";
  first.step.logprob = cadre::LogprobResult{{300, -0.5}, {{300, -0.5}, {301, -1.5}}};
  last.step.text = "!";
  last.step.finish = cadre::Finish::Stop;
  auto chat = cadre::response_context(cadre::Endpoint::Chat, "m", *tokenizer_, true);
  cadre::CompletionBuilder whole(chat, 2);
  whole.add(first);
  whole.add(last);
  const json r = whole.finish(5, 2);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["content"], " Hello");
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["total_tokens"], 7);
  cadre::ChunkBuilder chunks(chat, 2, true);
  const json c = chunks.chunk(first);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["delta"]["content"], " Hello");
  EXPECT_TRUE(c["usage"].is_null() && c.contains("usage"));
  EXPECT_TRUE(chunks.usage(5, 2)["choices"].empty());
  cadre::SequenceEvent empty{0, {}};
  EXPECT_TRUE(chunks.chunk(empty).is_null());  // nothing to say: no chunk
  auto completion = cadre::response_context(cadre::Endpoint::Completions, "m", *tokenizer_, true);
  cadre::CompletionBuilder text(completion, 1);
  text.add(first);
  const json t = text.finish(5, 1);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["logprobs"]["token_logprobs"][0], -0.5);
  EXPECT_EQ(t["choices"][0]["logprobs"]["text_offset"][0], 0);
}

TEST(ServeMetrics, HistogramBucketsAreCumulative) {
  cadre::Histogram h({0.1, 1});
  for (double v : {0.05, 0.5, 0.7, 3.0}) h.observe(v);
  const std::string text = h.text("x");
  EXPECT_NE(text.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_count 4\n"), std::string::npos) << text;
}

TEST(KvCacheBudget, BytesUnitsAndFractionsAreReadAsDocumented) {
  EXPECT_EQ(cadre::kv_cache_memory_bytes("8GiB", 0), int64_t{8} << 30);
  EXPECT_EQ(cadre::kv_cache_memory_bytes("500MB", 0), 500'000'000);
  EXPECT_EQ(cadre::kv_cache_memory_bytes("256kib", 0), 256 * 1024);
  EXPECT_EQ(cadre::kv_cache_memory_bytes("1073741824", 0), int64_t{1} << 30);
  EXPECT_EQ(cadre::kv_cache_memory_bytes("0.5", 1000), 500) << "a fraction of the available memory";
  EXPECT_EQ(cadre::kv_cache_memory_bytes("1.0", 1000), 1000);
  for (const char* bad : {"", "0", "0.0", "1.5", "-1", "abc", "8 GiB", "1e9", "5XB", "99999999999999999GiB"}) {
    try {
      cadre::kv_cache_memory_bytes(bad, 1000);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-cache-memory"), std::string::npos) << e.what();
    }
  }
}

// The budget in whole blocks of the decoder: the default is every slot's whole context unless
// that is more than half of what is available; a budget under one block is refused.
TEST(KvCacheBudget, TheBudgetIsWholeBlocksAndTheDefaultIsCappedAtHalfTheAvailableMemory) {
  cadre::LlamaConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.multiple_of = 32;
  c.max_seq_len = 1024;
  cadre::Llama model(c);
  cadre::LlamaDecoder decoder(model, {8, 0, at::kFloat});
  const int64_t per_token = decoder.cache_bytes_per_token(), whole = 8 * 1024;
  ASSERT_EQ(per_token, 512);
  const int64_t plenty = int64_t{1} << 40;
  auto budget = cadre::kv_cache_budget("", decoder, plenty);
  EXPECT_EQ(budget.tokens, whole);
  EXPECT_EQ(budget.bytes, whole * per_token);
  budget = cadre::kv_cache_budget("", decoder, 2 * 1000 * per_token);  // half: 1000 tokens, 3 whole blocks
  EXPECT_EQ(budget.tokens, 768);
  EXPECT_NE(budget.origin.find("capped at half"), std::string::npos) << budget.origin;
  EXPECT_EQ(cadre::kv_cache_budget("256KiB", decoder, plenty).tokens, 512);
  EXPECT_EQ(cadre::kv_cache_budget("300KiB", decoder, plenty).tokens, 512) << "rounded down to whole blocks";
  EXPECT_EQ(cadre::kv_cache_budget("1TiB", decoder, plenty).tokens, whole) << "never more than the slots can hold";
  try {
    cadre::kv_cache_budget("100KiB", decoder, plenty);
    ADD_FAILURE() << "a budget under one block was accepted";
  } catch (const cadre::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("less than one cache block (256 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
