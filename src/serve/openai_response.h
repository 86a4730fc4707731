// Responses of the OpenAI HTTP API: the whole completion (`text_completion`,
// `chat.completion`) or its stream of chunks (`text_completion` chunks, `chat.completion.chunk`
// with role, content deltas and finish reasons), usage counts and log-probabilities in each
// endpoint's own shape.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "serve/openai_request.h"
#include "serve/scheduler.h"

namespace cadre {

struct ResponseContext {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;     // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  const Tokenizer* tokenizer = nullptr;
  bool logprobs = false;
};

ResponseContext response_context(Endpoint endpoint, const std::string& model, const Tokenizer& tokenizer, bool logprobs);

// JSON text with invalid UTF-8 replaced (a token can be a lone byte).
std::string json_text(const nlohmann::json& j);

// Collects a request's events into the complete response.
class CompletionBuilder {
 public:
  CompletionBuilder(ResponseContext context, int64_t n);
  void add(const SequenceEvent& event);
  nlohmann::json finish(int64_t prompt_tokens, int64_t completion_tokens) const;

 private:
  struct Choice {
    std::string text, finish;
    nlohmann::json logprobs;
    int64_t token_offset = 0;  // where the next token starts in the tokens' own text
  };
  ResponseContext context_;
  std::vector<Choice> choices_;
};

// Streamed chunks: one per event that carries text, log-probabilities or a finish reason
// (null when there is nothing to send). Chat streams open each choice with its role.
class ChunkBuilder {
 public:
  ChunkBuilder(ResponseContext context, int64_t n, bool include_usage);
  nlohmann::json chunk(const SequenceEvent& event);
  nlohmann::json usage(int64_t prompt_tokens, int64_t completion_tokens) const;

 private:
  ResponseContext context_;
  std::vector<bool> opened_;
  std::vector<int64_t> text_offset_;
  bool include_usage_;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace cadre
