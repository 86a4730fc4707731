// Routes, authentication and the two generation endpoints over Cadre's HTTP server (http/).
#include "serve/http_server.h"

#include "http/server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "serve/api_error.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/sse.h"

namespace cadre {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Compares without an early exit, so the time taken does not reveal how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

void send_error(http::Response& res, const ApiError& e, const http::Headers& extra = {}) {
  http::Headers headers = extra;
  if (e.status == 429 || e.status == 503) headers.emplace_back("Retry-After", "1");
  res.send(e.status, "application/json", api_error_body(e), headers);
}

void send_json(http::Response& res, const std::string& body) { res.send(200, "application/json", body); }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

uint64_t random_seed() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpOptions o, Scheduler& s, const Tokenizer& t, const ChatTemplate& c, ServeMetrics& m)
      : options(std::move(o)), scheduler(s), tokenizer(t), chat(c), metrics(m) {}

  // A request taken into the scheduler's queue, and how its answer is shaped.
  struct Accepted {
    std::shared_ptr<RequestState> state;
    ResponseContext context;
    int64_t n = 1;
    bool stream = false, include_usage = false;
  };

  // Every request: the route, or 404/405 in OpenAI's error shape.
  void route(const http::Request& req, http::Response& res);
  void models(const http::Request& req, http::Response& res);
  // The two generation endpoints: accept (ApiError for anything refused), then answer whole
  // or as a stream of server-sent events.
  void generate(const http::Request& req, http::Response& res, Endpoint endpoint);
  Accepted accept(const http::Request& req, Endpoint endpoint);
  void answer_whole(const Accepted& accepted, http::Response& res, const std::string& route, Clock::time_point t0);
  void answer_stream(const Accepted& accepted, http::Response& res, const std::string& route, Clock::time_point t0);
  void check_auth(const http::Request& req) const;
  // The model's name (the base or an adapter: its index, -1 for the base), logit_bias within the vocabulary.
  int64_t check_request(const ApiRequest& r) const;
  std::vector<int> prompt_tokens(const ApiRequest& r) const;
  // The body of an error the HTTP layer answers itself (413, 431, 408, 503 over the connection
  // cap, ...), and its count.
  std::string error_body(int status, const std::string& message, const http::Request* req);
  void error_answered(int status, const http::Request* req);

  HttpOptions options;
  Scheduler& scheduler;
  const Tokenizer& tokenizer;
  const ChatTemplate& chat;
  ServeMetrics& metrics;
  // Streamed responses not yet closed, for the drain.
  std::mutex streams_mutex;
  std::condition_variable streams_closed;
  int64_t open_streams = 0;
  int64_t created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // Last: destroyed first, it waits for the connection threads that use the members above.
  std::unique_ptr<http::Server> server;
};

void HttpServer::Impl::check_auth(const http::Request& req) const {
  if (options.api_key.empty()) return;
  if (!same_secret(req.header("Authorization"), "Bearer " + options.api_key))
    throw ApiError(401, "Incorrect API key provided", "", "invalid_api_key");
}

std::vector<int> HttpServer::Impl::prompt_tokens(const ApiRequest& r) const {
  if (r.endpoint == Endpoint::Chat) {
    try {
      return chat.render(r.messages, tokenizer);
    } catch (const ChatRefused& e) {
      throw ApiError(400, e.what(), "messages");  // the template's own words, as transformers raises them
    }
  }
  if (!r.prompt_token_ids.empty()) {
    for (int id : r.prompt_token_ids)
      if (id >= options.vocab_size)
        throw ApiError(400, "'prompt' holds token id " + std::to_string(id) + ", beyond the vocabulary of " +
                                std::to_string(options.vocab_size), "prompt");
    return r.prompt_token_ids;
  }
  return tokenizer.encode_prompt(r.prompt);
}

namespace {

// OpenAI's wording for a request that does not fit the context.
ApiError context_error(Endpoint endpoint, int64_t context, int64_t used, int64_t max_tokens) {
  const std::string what = endpoint == Endpoint::Chat ? "messages" : "prompt";
  const int64_t completion = std::max<int64_t>(max_tokens, 0);
  return ApiError(400,
                  "This model's maximum context length is " + std::to_string(context) + " tokens. However, you requested " +
                      std::to_string(used + completion) + " tokens (" + std::to_string(used) + " in the " + what + ", " +
                      std::to_string(completion) + " in the completion). Please reduce the length of the " + what +
                      " or completion.",
                  what, "context_length_exceeded");
}

}  // namespace

int64_t HttpServer::Impl::check_request(const ApiRequest& r) const {
  const auto adapter = options.adapters.find(r.model);
  if (r.model != options.model_name && adapter == options.adapters.end()) {
    std::string served = "'" + options.model_name + "'";
    for (const auto& [name, index] : options.adapters) served += ", '" + name + "'";
    throw ApiError(404, "The model '" + r.model + "' does not exist (this server serves " + served + ")", "model",
                   "model_not_found");
  }
  for (const auto& [token, bias] : r.params.sampling.logit_bias)
    if (token >= options.vocab_size)
      throw ApiError(400, "'logit_bias' names token " + std::to_string(token) + ", beyond the vocabulary of " +
                              std::to_string(options.vocab_size), "logit_bias");
  return adapter == options.adapters.end() ? -1 : adapter->second;
}

HttpServer::Impl::Accepted HttpServer::Impl::accept(const http::Request& req, Endpoint endpoint) {
  check_auth(req);
  const int64_t max_n = scheduler.options().max_batch;
  ApiRequest r = endpoint == Endpoint::Chat ? parse_chat_request(req.body, max_n) : parse_completion_request(req.body, max_n);
  const int64_t adapter = check_request(r);
  std::vector<int> prompt = prompt_tokens(r);
  const int64_t context = scheduler.context(), used = static_cast<int64_t>(prompt.size());
  if (r.params.max_tokens < 0) r.params.max_tokens = context - used;  // chat without max_tokens: the rest
  if (used + r.params.max_tokens > context || used >= context)
    throw context_error(endpoint, context, used, r.params.max_tokens);
  const uint64_t seed = r.seeded ? r.params.sampling.seed : random_seed();
  std::shared_ptr<RequestState> state = scheduler.submit(std::move(prompt), r.params, r.n, seed, adapter);
  if (!state)
    throw ApiError(429, "The server is at capacity (" + std::to_string(scheduler.options().max_queue) +
                            " requests queued); retry later", "", "rate_limit_exceeded", "requests");
  return {state, response_context(endpoint, r.model, tokenizer, r.params.logprobs >= 0), r.n, r.stream,
          r.include_usage};
}

// Waits for the whole answer; a client that leaves meanwhile cancels its request, which frees
// its slots at the next decoding step instead of when the answer is complete.
void HttpServer::Impl::answer_whole(const Accepted& a, http::Response& res, const std::string& route,
                                    Clock::time_point t0) {
  CompletionBuilder builder(a.context, a.n);
  std::vector<SequenceEvent> events;
  while (a.state->next(events, std::chrono::milliseconds(200))) {
    for (const auto& e : events) builder.add(e);
    events.clear();
    if (res.client_gone()) {
      a.state->cancel();
      metrics.request_done(route, 499, seconds_since(t0));
      res.abandon();
      return;
    }
  }
  for (const auto& e : events) builder.add(e);
  if (!a.state->error().empty()) throw ApiError(500, a.state->error(), "", "internal_error", "server_error");
  res.send(200, "application/json", json_text(builder.finish(a.state->prompt_tokens(), a.state->completion_tokens())));
  metrics.request_done(route, 200, seconds_since(t0));
}

namespace {

// Writes the stream's events as they come: the events that are there, a keep-alive comment
// each second while a queued request waits, then the end (an error event or the usage, then
// [DONE]). False: the client went away or stopped reading past the send deadline.
bool stream_events(RequestState& state, ChunkBuilder& chunks, bool include_usage, http::Response& res) {
  std::vector<SequenceEvent> events;
  while (true) {
    const bool more = state.next(events, std::chrono::milliseconds(1000));
    if (more && events.empty()) {
      if (!res.write(sse_comment("waiting for a decoding slot"))) return false;
      continue;
    }
    std::string text;
    for (const auto& e : events) {
      json chunk = chunks.chunk(e);
      if (!chunk.is_null()) text += sse_event(json_text(chunk));
    }
    events.clear();
    if (!more) {
      if (!state.error().empty())
        text += sse_event(api_error_body(ApiError(500, state.error(), "", "internal_error", "server_error")));
      else if (include_usage)
        text += sse_event(json_text(chunks.usage(state.prompt_tokens(), state.completion_tokens())));
      text += sse_done();
    }
    if (!text.empty() && !res.write(text)) return false;
    if (!more) return res.end_stream();
  }
}

}  // namespace

void HttpServer::Impl::answer_stream(const Accepted& a, http::Response& res, const std::string& route,
                                     Clock::time_point t0) {
  ChunkBuilder chunks(a.context, a.n, a.include_usage);
  {
    std::lock_guard<std::mutex> lock(streams_mutex);
    ++open_streams;
  }
  bool success = res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}) &&
                 stream_events(*a.state, chunks, a.include_usage, res);
  if (!success) a.state->cancel();  // the client left or stopped reading: its slots are freed
  metrics.request_done(route, success ? 200 : 499, seconds_since(t0));
  std::lock_guard<std::mutex> lock(streams_mutex);
  --open_streams;
  streams_closed.notify_all();
}

void HttpServer::Impl::generate(const http::Request& req, http::Response& res, Endpoint endpoint) {
  const auto t0 = Clock::now();
  const std::string route = endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
  Accepted accepted;
  try {
    accepted = accept(req, endpoint);
  } catch (const ApiError& e) {
    send_error(res, e);
    metrics.request_done(route, e.status, seconds_since(t0));
    return;
  }
  try {
    if (accepted.stream) answer_stream(accepted, res, route, t0);
    else answer_whole(accepted, res, route, t0);
  } catch (...) {
    accepted.state->cancel();  // whatever failed, the slots go back
    throw;
  }
}

void HttpServer::Impl::models(const http::Request& req, http::Response& res) {
  check_auth(req);
  // The base, then each adapter with the base as its parent (as vLLM lists LoRA modules).
  json list = json::array({{{"id", options.model_name}, {"object", "model"}, {"created", created}, {"owned_by", "cadre"}}});
  for (const auto& [name, index] : options.adapters)
    list.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "cadre"},
                    {"parent", options.model_name}});
  if (req.path == "/v1/models") return send_json(res, json_text({{"object", "list"}, {"data", list}}));
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  for (const auto& model : list)
    if (model["id"] == id) return send_json(res, json_text(model));
  throw ApiError(404, "The model '" + id + "' does not exist", "model", "model_not_found");
}

void HttpServer::Impl::route(const http::Request& req, http::Response& res) {
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
  const bool generation = path == "/v1/completions" || path == "/v1/chat/completions";
  const bool known = generation || path == "/health" || path == "/metrics" || path == "/v1/models" ||
                     (starts_with(path, "/v1/models/") && path.size() > 11);
  try {
    if (!known) throw ApiError(404, "no such route");
    if (generation != post) throw ApiError(405, "method not allowed");
    if (!generation && !get) throw ApiError(405, "method not allowed");
    if (path == "/health") {
      if (scheduler.draining()) res.send(503, "application/json", R"({"status":"draining"})", {{"Retry-After", "1"}});
      else send_json(res, R"({"status":"ok"})");
    } else if (path == "/metrics") {
      res.send(200, "text/plain; version=0.0.4", metrics.text());
    } else if (!generation) {
      models(req, res);
    } else {
      generate(req, res, path == "/v1/chat/completions" ? Endpoint::Chat : Endpoint::Completions);
    }
  } catch (const ApiError& e) {
    http::Headers extra;
    if (e.status == 405) extra.emplace_back("Allow", generation ? "POST" : "GET, HEAD");
    send_error(res, e, extra);
    // Unknown paths are counted under one name, so a scanner cannot grow the metrics.
    if (!generation && (e.status == 404 || e.status == 405) && !starts_with(path, "/v1/models"))
      metrics.request_done("other", e.status, 0);
  }
}

void HttpServer::Impl::error_answered(int status, const http::Request* req) {
  const bool known = req && (req->path == "/v1/completions" || req->path == "/v1/chat/completions");
  metrics.request_done(known ? req->path : "other", status, 0);
  if (status == 503 && !req) metrics.rejected("connection_limit");
  if (status == 429 && !req) metrics.rejected("client_connection_limit");
}

std::string HttpServer::Impl::error_body(int status, const std::string& message, const http::Request*) {
  if (status == 500) return api_error_body(ApiError(500, message, "", "internal_error", "server_error"));
  return api_error_body(ApiError(status, message));
}

namespace {

http::ServerLimits server_limits(const HttpOptions& o) {
  http::ServerLimits l;
  l.parser.max_body_bytes = o.max_body_bytes;
  l.parser.max_header_bytes = static_cast<size_t>(o.max_header_bytes);
  l.header_timeout_s = o.header_timeout_s;
  l.body_timeout_s = o.body_timeout_s;
  l.idle_timeout_s = o.idle_timeout_s;
  l.send_timeout_s = o.send_timeout_s;
  l.max_connections = o.max_connections;
  l.max_connections_per_client = o.max_connections_per_client;
  l.trusted_proxies = o.trusted_proxies;
  l.proxy_protocol = o.proxy_protocol;
  return l;
}

}  // namespace

HttpServer::HttpServer(HttpOptions options, Scheduler& scheduler, const Tokenizer& tokenizer, const ChatTemplate& chat,
                       ServeMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), scheduler, tokenizer, chat, metrics)) {
  Impl& i = *impl_;
  i.server = std::make_unique<http::Server>(
      server_limits(i.options), [&i](const http::Request& req, http::Response& res) { i.route(req, res); },
      http::ErrorPage{"application/json", [&i](int status, const std::string& message, const http::Request* req) {
                        return i.error_body(status, message, req);
                      },
                      [&i](int status, const http::Request* req) { i.error_answered(status, req); }});
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  impl_->server->bind(o.host, o.port, "--host/--port");
  port_ = impl_->server->port();
}

void HttpServer::run() { impl_->server->run(); }

bool HttpServer::wait_streams_done(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(impl_->streams_mutex);
  return impl_->streams_closed.wait_until(lock, deadline, [&] { return impl_->open_streams == 0; });
}

void HttpServer::stop() { impl_->server->stop(); }

}  // namespace cadre
