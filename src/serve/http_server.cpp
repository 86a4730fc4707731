// Routes, authentication, limits and the two generation endpoints over cpp-httplib.
#include "serve/http_server.h"

#include <httplib.h>

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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  res.set_content(api_error_body(e), "application/json");
}

std::string status_message(int status, int64_t max_body) {
  switch (status) {
    case 404: return "no such route";
    case 405: return "method not allowed";
    case 413: return "the request body exceeds the limit of " + std::to_string(max_body) + " bytes";
    case 414: return "the request URI is too long";
    default: return "request failed with HTTP status " + std::to_string(status);
  }
}

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

  void routes();
  // The two generation endpoints: accept (ApiError for anything refused), then answer whole
  // or as a stream of server-sent events.
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  Accepted accept(const httplib::Request& req, Endpoint endpoint);
  void answer_whole(const Accepted& accepted, httplib::Response& res);
  void answer_stream(const Accepted& accepted, httplib::Response& res, const std::string& route, Clock::time_point t0);
  void check_auth(const httplib::Request& req) const;
  void check_request(const ApiRequest& r) const;  // the model's name, logit_bias within the vocabulary
  std::vector<int> prompt_tokens(const ApiRequest& r) const;

  HttpOptions options;
  Scheduler& scheduler;
  const Tokenizer& tokenizer;
  const ChatTemplate& chat;
  ServeMetrics& metrics;
  httplib::Server server;
  // Streamed responses not yet closed (their releaser has not run), for the drain.
  std::mutex streams_mutex;
  std::condition_variable streams_closed;
  int64_t open_streams = 0;
  int64_t created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
};

void HttpServer::Impl::check_auth(const httplib::Request& req) const {
  if (options.api_key.empty()) return;
  if (!same_secret(req.get_header_value("Authorization"), "Bearer " + options.api_key))
    throw ApiError(401, "Incorrect API key provided", "", "invalid_api_key");
}

std::vector<int> HttpServer::Impl::prompt_tokens(const ApiRequest& r) const {
  if (r.endpoint == Endpoint::Chat) return chat.render(r.messages, tokenizer);
  if (!r.prompt_token_ids.empty()) {
    for (int id : r.prompt_token_ids)
      if (id >= options.vocab_size)
        throw ApiError(400, "'prompt' holds token id " + std::to_string(id) + ", beyond the vocabulary of " +
                                std::to_string(options.vocab_size), "prompt");
    return r.prompt_token_ids;
  }
  std::vector<int> ids = {tokenizer.bos_id()};  // Llama's tokenizer adds BOS
  const auto text = tokenizer.encode(r.prompt);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
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

void HttpServer::Impl::check_request(const ApiRequest& r) const {
  if (r.model != options.model_name)
    throw ApiError(404, "The model '" + r.model + "' does not exist (this server serves '" + options.model_name + "')",
                   "model", "model_not_found");
  for (const auto& [token, bias] : r.params.sampling.logit_bias)
    if (token >= options.vocab_size)
      throw ApiError(400, "'logit_bias' names token " + std::to_string(token) + ", beyond the vocabulary of " +
                              std::to_string(options.vocab_size), "logit_bias");
}

HttpServer::Impl::Accepted HttpServer::Impl::accept(const httplib::Request& req, Endpoint endpoint) {
  check_auth(req);
  const int64_t max_n = scheduler.options().max_batch;
  ApiRequest r = endpoint == Endpoint::Chat ? parse_chat_request(req.body, max_n) : parse_completion_request(req.body, max_n);
  check_request(r);
  std::vector<int> prompt = prompt_tokens(r);
  const int64_t context = scheduler.context(), used = static_cast<int64_t>(prompt.size());
  if (r.params.max_tokens < 0) r.params.max_tokens = context - used;  // chat without max_tokens: the rest
  if (used + r.params.max_tokens > context || used >= context)
    throw context_error(endpoint, context, used, r.params.max_tokens);
  const uint64_t seed = r.seeded ? r.params.sampling.seed : random_seed();
  std::shared_ptr<RequestState> state = scheduler.submit(std::move(prompt), r.params, r.n, seed);
  if (!state)
    throw ApiError(429, "The server is at capacity (" + std::to_string(scheduler.options().max_queue) +
                            " requests queued); retry later", "", "rate_limit_exceeded", "requests");
  return {state, response_context(endpoint, options.model_name, tokenizer, r.params.logprobs >= 0), r.n, r.stream,
          r.include_usage};
}

void HttpServer::Impl::answer_whole(const Accepted& a, httplib::Response& res) {
  CompletionBuilder builder(a.context, a.n);
  std::vector<SequenceEvent> events;
  while (a.state->next(events)) {
    for (const auto& e : events) builder.add(e);
    events.clear();
  }
  if (!a.state->error().empty()) throw ApiError(500, a.state->error(), "", "internal_error", "server_error");
  res.set_content(json_text(builder.finish(a.state->prompt_tokens(), a.state->completion_tokens())), "application/json");
}

namespace {

// One call of the chunked content provider: the events that are there, a keep-alive comment,
// or the end (an error event or the usage, then [DONE]). False: the client went away.
bool stream_events(RequestState& state, ChunkBuilder& chunks, bool include_usage, httplib::DataSink& sink) {
  std::vector<SequenceEvent> events;
  // A queued request may wait a while: a comment each second keeps the connection and
  // finds a client that left (the write fails).
  const bool more = state.next(events, std::chrono::milliseconds(1000));
  if (more && events.empty()) {
    const std::string ping = sse_comment("waiting for a decoding slot");
    return sink.write(ping.data(), ping.size());
  }
  for (const auto& e : events) {
    json chunk = chunks.chunk(e);
    if (chunk.is_null()) continue;
    const std::string event = sse_event(json_text(chunk));
    if (!sink.write(event.data(), event.size())) return false;
  }
  if (more) return true;
  std::string tail;
  if (!state.error().empty())
    tail += sse_event(api_error_body(ApiError(500, state.error(), "", "internal_error", "server_error")));
  else if (include_usage)
    tail += sse_event(json_text(chunks.usage(state.prompt_tokens(), state.completion_tokens())));
  tail += sse_done();
  if (!sink.write(tail.data(), tail.size())) return false;
  sink.done();
  return true;
}

}  // namespace

void HttpServer::Impl::answer_stream(const Accepted& a, httplib::Response& res, const std::string& route,
                                     Clock::time_point t0) {
  auto chunks = std::make_shared<ChunkBuilder>(a.context, a.n, a.include_usage);
  std::shared_ptr<RequestState> state = a.state;
  const bool include_usage = a.include_usage;
  res.set_header("Cache-Control", "no-cache");
  {
    std::lock_guard<std::mutex> lock(streams_mutex);
    ++open_streams;
  }
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, chunks, include_usage](size_t, httplib::DataSink& sink) {
        return stream_events(*state, *chunks, include_usage, sink);
      },
      [this, state, route, t0](bool success) {
        // Called when the response ends: unsuccessfully when the client went away.
        if (!success) state->cancel();
        metrics.request_done(route, success ? 200 : 499, seconds_since(t0));
        std::lock_guard<std::mutex> lock(streams_mutex);
        --open_streams;
        streams_closed.notify_all();
      });
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const auto t0 = Clock::now();
  const std::string route = endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
  try {
    const Accepted accepted = accept(req, endpoint);
    if (accepted.stream) {
      answer_stream(accepted, res, route, t0);  // its end is counted when the stream closes
    } else {
      answer_whole(accepted, res);
      metrics.request_done(route, 200, seconds_since(t0));
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    metrics.request_done(route, e.status, seconds_since(t0));
  }
}

void HttpServer::Impl::routes() {
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler.draining()) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.text(), "text/plain; version=0.0.4");
  });
  auto model_json = [this] {
    return json{{"id", options.model_name}, {"object", "model"}, {"created", created}, {"owned_by", "cadre"}};
  };
  server.Get("/v1/models", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    try {
      check_auth(req);
      res.set_content(json_text({{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  server.Get(R"(/v1/models/(.+))", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    try {
      check_auth(req);
      if (req.matches[1] != options.model_name)
        throw ApiError(404, "The model '" + std::string(req.matches[1]) + "' does not exist", "model", "model_not_found");
      res.set_content(json_text(model_json()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::Completions);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::Chat);
  });
  // Errors httplib answers itself (unknown route, body too large, ...) get OpenAI's shape too.
  server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    res.set_content(api_error_body(ApiError(res.status, status_message(res.status, options.max_body_bytes))),
                    "application/json");
    // Unknown paths are counted under one name, so a scanner cannot grow the metrics.
    const bool known = req.path == "/v1/completions" || req.path == "/v1/chat/completions";
    metrics.request_done(known ? req.path : "other", res.status, 0);
  });
  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("serve: " + req.method + " " + req.path + ": " + what);
    res.status = 500;
    res.set_content(api_error_body(ApiError(500, what, "", "internal_error", "server_error")), "application/json");
  });
  server.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  server.set_keep_alive_timeout(5);
  // Each request in the queue or being decoded holds a thread (it waits for its tokens), so
  // the pool covers them all plus room to answer health checks, metrics and 429s.
  const size_t threads = static_cast<size_t>(scheduler.options().max_batch + scheduler.options().max_queue + 16);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
}

HttpServer::HttpServer(HttpOptions options, Scheduler& scheduler, const Tokenizer& tokenizer, const ChatTemplate& chat,
                       ServeMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), scheduler, tokenizer, chat, metrics)) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    port_ = impl_->server.bind_to_any_port(o.host.c_str());
    CADRE_CONFIG_CHECK(port_ > 0, "cannot listen on ", o.host, " (any port)");
  } else {
    CADRE_CONFIG_CHECK(impl_->server.bind_to_port(o.host.c_str(), o.port), "cannot listen on ", o.host, ":", o.port,
                       " (in use, or not an address of this machine)");
    port_ = o.port;
  }
}

void HttpServer::run() { impl_->server.listen_after_bind(); }

bool HttpServer::wait_streams_done(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(impl_->streams_mutex);
  return impl_->streams_closed.wait_until(lock, deadline, [&] { return impl_->open_streams == 0; });
}

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace cadre
