// The OpenAI-compatible HTTP front of `cadre serve` (over http/server.h): routes
//   GET  /health               200 {"status":"ok"}, 503 while draining
//   GET  /metrics              Prometheus text
//   GET  /v1/models[/<id>]     the one model served
//   POST /v1/completions       prompt -> text (stream: SSE chunks ending in data: [DONE])
//   POST /v1/chat/completions  messages -> chat template -> text
// with `Authorization: Bearer <key>` checked on /v1/* when a key is set (401), a request body
// limit (413, chunked bodies included), header, idle, send and connection limits (see
// http/server.h), the context length enforced (400, OpenAI's context_length_exceeded), a full
// queue answered 429, and every error in OpenAI's JSON shape. A streaming client that goes
// away (or stops reading past the send timeout) cancels its request, and so does a client of a
// whole answer that closes its connection: its decoding slots are freed at the next step.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "data/tokenizer.h"
#include "http/trusted_proxies.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace cadre {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                           // 0: any free port (see bound_port())
  std::string api_key;                       // empty: no authentication
  int64_t max_body_bytes = int64_t{1} << 20;
  int64_t max_header_bytes = 32 * 1024;
  // Generous beside a client's own pauses (an asyncio client opening 32 connections on a loaded
  // machine may send its request seconds after connecting): a slow client costs a thread for
  // this long, and the connection cap bounds how many threads that is.
  double header_timeout_s = 30, body_timeout_s = 60, idle_timeout_s = 30, send_timeout_s = 30;
  int max_connections = 256;
  int max_connections_per_client = 64;  // 0: none
  http::TrustedProxies trusted_proxies;  // whose X-Forwarded-For names the client the cap counts
  bool proxy_protocol = false;           // trusted proxies' connections begin with a PROXY header
  std::string model_name;
  // LoRA adapters served beside the base (--lora name=path): the id a request's `model` names ->
  // the decoder's adapter index. /v1/models lists them after the base.
  std::map<std::string, int64_t> adapters;
  int64_t vocab_size = 0;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, Scheduler& scheduler, const Tokenizer& tokenizer, const ChatTemplate& chat,
             ServeMetrics& metrics);
  ~HttpServer();
  // Binds the listening socket; ConfigError naming the address when it cannot.
  void bind();
  int bound_port() const { return port_; }
  // Serves until stop(); requests in flight complete before it returns.
  void run();
  // Blocks until every streamed response has written its last chunk (or its client left), or
  // until `deadline`; false on the deadline. A drain calls it once the scheduler is idle:
  // stop() would cut a stream whose tail (usage, `data: [DONE]`) is not yet written.
  bool wait_streams_done(std::chrono::steady_clock::time_point deadline);
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace cadre
