// Building OpenAI response bodies and stream chunks from a request's events.
#include "serve/openai_response.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace cadre {
namespace {

using json = nlohmann::json;

std::string token_text(const Tokenizer& tokenizer, int64_t id) { return tokenizer.token_text(static_cast<int>(id)); }

json bytes_of(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// Chat: {"token", "logprob", "bytes", "top_logprobs": [...]}.
json chat_logprob(const Tokenizer& tokenizer, const LogprobResult& lp) {
  const std::string text = token_text(tokenizer, lp.chosen.token);
  json top = json::array();
  for (const auto& t : lp.top) {
    const std::string s = token_text(tokenizer, t.token);
    top.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}});
  }
  return {{"token", text}, {"logprob", lp.chosen.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}};
}

// Completions: parallel lists.
void completion_logprob(const Tokenizer& tokenizer, const LogprobResult& lp, int64_t offset, json& into) {
  if (into.is_null())
    into = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  into["tokens"].push_back(token_text(tokenizer, lp.chosen.token));
  into["token_logprobs"].push_back(lp.chosen.logprob);
  json top = json::object();
  for (const auto& t : lp.top) top[token_text(tokenizer, t.token)] = t.logprob;
  into["top_logprobs"].push_back(top);
  into["text_offset"].push_back(offset);
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen() & 0xffffffffull));
  return buf;
}

}  // namespace

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(int64_t prompt, int64_t completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

ResponseContext response_context(Endpoint endpoint, const std::string& model, const Tokenizer& tokenizer, bool logprobs) {
  ResponseContext c;
  c.endpoint = endpoint;
  c.id = random_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-");
  c.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  c.model = model;
  c.tokenizer = &tokenizer;
  c.logprobs = logprobs;
  return c;
}

CompletionBuilder::CompletionBuilder(ResponseContext context, int64_t n)
    : context_(std::move(context)), choices_(static_cast<size_t>(n)) {}

void CompletionBuilder::add(const SequenceEvent& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  if (e.step.logprob) {
    if (context_.endpoint == Endpoint::Chat) {
      if (c.logprobs.is_null()) c.logprobs = {{"content", json::array()}, {"refusal", nullptr}};
      c.logprobs["content"].push_back(chat_logprob(*context_.tokenizer, *e.step.logprob));
    } else {
      completion_logprob(*context_.tokenizer, *e.step.logprob, c.token_offset, c.logprobs);
      c.token_offset += static_cast<int64_t>(c.logprobs["tokens"].back().get<std::string>().size());
    }
  }
  c.text += e.step.text;
  if (e.step.finish != Finish::None) c.finish = finish_reason(e.step.finish);
}

json CompletionBuilder::finish(int64_t prompt_tokens, int64_t completion_tokens) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const json finish = c.finish.empty() ? json() : json(c.finish);
    if (context_.endpoint == Endpoint::Chat)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                         {"logprobs", c.logprobs},
                         {"finish_reason", finish}});
    else
      choices.push_back({{"index", i}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", finish}});
  }
  return {{"id", context_.id},
          {"object", context_.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion"},
          {"created", context_.created},
          {"model", context_.model},
          {"system_fingerprint", nullptr},
          {"choices", choices},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

ChunkBuilder::ChunkBuilder(ResponseContext context, int64_t n, bool include_usage)
    : context_(std::move(context)),
      opened_(static_cast<size_t>(n), false),
      text_offset_(static_cast<size_t>(n), 0),
      include_usage_(include_usage) {}

json ChunkBuilder::chunk(const SequenceEvent& e) {
  const size_t i = static_cast<size_t>(e.choice);
  const bool chat = context_.endpoint == Endpoint::Chat;
  const bool first = chat && !opened_[i];
  if (e.step.text.empty() && !e.step.logprob && e.step.finish == Finish::None && !first) return nullptr;
  opened_[i] = true;
  json logprobs = nullptr;
  if (e.step.logprob) {
    if (chat) {
      logprobs = {{"content", json::array({chat_logprob(*context_.tokenizer, *e.step.logprob)})}, {"refusal", nullptr}};
    } else {
      completion_logprob(*context_.tokenizer, *e.step.logprob, text_offset_[i], logprobs);
    }
  }
  text_offset_[i] += static_cast<int64_t>(e.step.text.size());
  const json finish = e.step.finish == Finish::None ? json() : json(finish_reason(e.step.finish));
  json choice;
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !e.step.text.empty()) delta["content"] = e.step.text;
    choice = {{"index", i}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}};
  } else {
    choice = {{"index", i}, {"text", e.step.text}, {"logprobs", logprobs}, {"finish_reason", finish}};
  }
  json out = {{"id", context_.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", context_.created},
              {"model", context_.model},
              {"system_fingerprint", nullptr},
              {"choices", json::array({choice})}};
  if (include_usage_) out["usage"] = nullptr;
  return out;
}

json ChunkBuilder::usage(int64_t prompt_tokens, int64_t completion_tokens) const {
  return {{"id", context_.id},
          {"object", context_.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", context_.created},
          {"model", context_.model},
          {"system_fingerprint", nullptr},
          {"choices", json::array()},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

}  // namespace cadre
