// Field-by-field checks of OpenAI request bodies. Unknown fields are refused by name.
#include "serve/openai_request.h"

#include <nlohmann/json.hpp>
#include <set>

namespace cadre {
namespace {

using json = nlohmann::json;

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

void check_known(const json& j, const std::set<std::string>& known, const std::set<std::string>& unsupported) {
  for (const auto& [key, value] : j.items()) {
    if (unsupported.count(key)) {
      if (value.is_null()) continue;
      throw bad(key, "'" + key + "' is not supported by this server");
    }
    if (!known.count(key)) throw bad(key, "unknown or unsupported field '" + key + "'");
  }
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

double number(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) throw bad(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw bad(key, std::string("'") + key + "' must be between " + json(lo).dump() + " and " + json(hi).dump());
  return x;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!v.is_number_integer()) throw bad(key, std::string("'") + key + "' must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return x;
}

bool boolean(const json& j, const char* key) {
  if (!j[key].is_boolean()) throw bad(key, std::string("'") + key + "' must be a boolean");
  return j[key].get<bool>();
}

// Fields both endpoints share.
void parse_common(const json& j, ApiRequest& r, int64_t max_n) {
  if (!present(j, "model") || !j["model"].is_string()) throw bad("model", "'model' is required and must be a string");
  r.model = j["model"].get<std::string>();
  GenerationParams& p = r.params;
  p.max_tokens = -1;
  if (present(j, "max_tokens")) p.max_tokens = integer(j, "max_tokens", 1, int64_t{1} << 31);
  if (present(j, "temperature")) p.sampling.temperature = number(j, "temperature", 0, 2);
  if (present(j, "top_p")) {
    p.sampling.top_p = number(j, "top_p", 0, 1);
    if (p.sampling.top_p <= 0) throw bad("top_p", "'top_p' must be greater than 0");
  }
  if (present(j, "top_k")) p.sampling.top_k = integer(j, "top_k", 0, int64_t{1} << 31);
  if (present(j, "repetition_penalty")) {
    p.sampling.repetition_penalty = number(j, "repetition_penalty", 0, 10);
    if (p.sampling.repetition_penalty <= 0) throw bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
  }
  if (present(j, "n")) r.n = integer(j, "n", 1, max_n);
  if (present(j, "stream")) r.stream = boolean(j, "stream");
  if (present(j, "stream_options")) {
    const json& o = j["stream_options"];
    if (!o.is_object()) throw bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    for (const auto& [key, value] : o.items())
      if (key != "include_usage") throw bad("stream_options." + key, "unknown or unsupported field 'stream_options." + key + "'");
    if (present(o, "include_usage")) {
      if (!o["include_usage"].is_boolean()) throw bad("stream_options.include_usage", "'include_usage' must be a boolean");
      r.include_usage = o["include_usage"].get<bool>();
    }
  }
  if (present(j, "stop")) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p.stop = {s.get<std::string>()};
    } else if (s.is_array()) {
      if (s.size() > 4) throw bad("stop", "'stop' takes at most 4 sequences");
      for (const auto& e : s) {
        if (!e.is_string()) throw bad("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      throw bad("stop", "'stop' must be a string or a list of strings");
    }
  }
  if (present(j, "seed")) {
    if (!j["seed"].is_number_integer()) throw bad("seed", "'seed' must be an integer");
    p.sampling.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : static_cast<uint64_t>(j["seed"].get<int64_t>());
    r.seeded = true;
  }
  if (present(j, "logit_bias")) {
    const json& b = j["logit_bias"];
    if (!b.is_object()) throw bad("logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
    for (const auto& [key, value] : b.items()) {
      int64_t token = -1;
      try {
        size_t used = 0;
        token = std::stoll(key, &used);
        if (used != key.size()) token = -1;
      } catch (const std::exception&) {
        token = -1;
      }
      if (token < 0) throw bad("logit_bias", "'logit_bias' key '" + key + "' is not a token id");
      if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100)
        throw bad("logit_bias", "'logit_bias' values must be numbers between -100 and 100");
      p.sampling.logit_bias[token] = value.get<double>();
    }
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"})
    if (present(j, penalty) && number(j, penalty, -2, 2) != 0)
      throw bad(penalty, std::string("'") + penalty + "' is not supported by this server (use repetition_penalty)");
  if (present(j, "user") && !j["user"].is_string()) throw bad("user", "'user' must be a string");
}

const std::set<std::string> kCommon = {"model", "max_tokens", "temperature", "top_p", "top_k", "repetition_penalty",
                                       "n", "stream", "stream_options", "stop", "seed", "logit_bias",
                                       "presence_penalty", "frequency_penalty", "user"};

std::set<std::string> with(std::set<std::string> s, std::initializer_list<const char*> more) {
  for (const char* m : more) s.insert(m);
  return s;
}

}  // namespace

ApiRequest parse_completion_request(const std::string& body, int64_t max_n) {
  const json j = parse_body(body);
  check_known(j, with(kCommon, {"prompt", "logprobs", "echo"}), {"suffix", "best_of"});
  ApiRequest r;
  r.endpoint = Endpoint::Completions;
  parse_common(j, r, max_n);
  if (r.params.max_tokens < 0) r.params.max_tokens = 16;  // OpenAI's default for completions
  if (!present(j, "prompt")) throw bad("prompt", "'prompt' is required");
  const json& prompt = j["prompt"];
  auto token_list = [&](const json& list) {
    std::vector<int> ids;
    for (const auto& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > (int64_t{1} << 30))
        throw bad("prompt", "'prompt' token ids must be non-negative integers");
      ids.push_back(t.get<int>());
    }
    if (ids.empty()) throw bad("prompt", "'prompt' must not be empty");
    return ids;
  };
  if (prompt.is_string()) {
    r.prompt = prompt.get<std::string>();
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    r.prompt_token_ids = token_list(prompt);
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    r.prompt = prompt[0].get<std::string>();
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_array()) {
    r.prompt_token_ids = token_list(prompt[0]);
  } else if (prompt.is_array() && prompt.size() > 1) {
    throw bad("prompt", "several prompts in one request are not supported; send one request per prompt");
  } else {
    throw bad("prompt", "'prompt' must be a string, a list of token ids, or a list holding one of those");
  }
  if (present(j, "logprobs")) r.params.logprobs = integer(j, "logprobs", 0, 5);
  if (present(j, "echo") && boolean(j, "echo")) throw bad("echo", "'echo' is not supported by this server");
  return r;
}

ApiRequest parse_chat_request(const std::string& body, int64_t max_n) {
  const json j = parse_body(body);
  check_known(j, with(kCommon, {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "response_format"}),
              {"tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "audio", "modalities",
               "prediction", "web_search_options", "reasoning_effort"});
  ApiRequest r;
  r.endpoint = Endpoint::Chat;
  parse_common(j, r, max_n);
  if (present(j, "max_completion_tokens")) r.params.max_tokens = integer(j, "max_completion_tokens", 1, int64_t{1} << 31);
  if (!present(j, "messages") || !j["messages"].is_array() || j["messages"].empty())
    throw bad("messages", "'messages' is required and must be a non-empty list");
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const json& m = j["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad(where, "'" + where + "' must be an object");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        throw bad(where + "." + key, "unknown or unsupported field '" + where + "." + key + "'");
    if (!present(m, "role") || !m["role"].is_string()) throw bad(where + ".role", "'" + where + ".role' must be a string");
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for it
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      throw bad(where + ".role", "'" + where + ".role' must be system, user or assistant (got '" + msg.role + "')");
    if (!present(m, "content")) throw bad(where + ".content", "'" + where + ".content' is required");
    const json& c = m["content"];
    if (c.is_string()) {
      msg.content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          throw bad(where + ".content", "'" + where + ".content' parts must be {\"type\": \"text\", \"text\": ...}");
        msg.content += part["text"].get<std::string>();
      }
    } else {
      throw bad(where + ".content", "'" + where + ".content' must be a string or a list of text parts");
    }
    if (present(m, "name") && !m["name"].is_string()) throw bad(where + ".name", "'" + where + ".name' must be a string");
    r.messages.push_back(std::move(msg));
  }
  bool logprobs = present(j, "logprobs") && boolean(j, "logprobs");
  if (present(j, "top_logprobs")) {
    if (!logprobs) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.params.logprobs = integer(j, "top_logprobs", 0, 20);
  } else if (logprobs) {
    r.params.logprobs = 0;
  }
  if (present(j, "response_format")) {
    const json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      throw bad("response_format", "'response_format' must be an object with a 'type'");
    if (f["type"] != "text")
      throw bad("response_format", "'response_format' type '" + f["type"].get<std::string>() +
                                       "' is not supported by this server (only 'text')");
  }
  return r;
}

}  // namespace cadre
