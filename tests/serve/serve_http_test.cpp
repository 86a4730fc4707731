// `cadre serve` over real HTTP on loopback, against the tiny model the tiny_model fixture
// trained: bad requests get OpenAI-shaped 4xx answers and the server stays up; the API key;
// a full queue answers 429; a client that disconnects frees its slot; SIGTERM drains the
// requests in flight (503 for new ones meanwhile) and ends a batching wait; the batching wait
// counts sequences; a KV-cache budget queues what fits later and refuses what never fits,
// with the same tokens as without one, and a thousand slots take no cache memory until used;
// /metrics passes promtool. (The OpenAI client and the 32-client load
// test are pytest tests in python/ beside this file.)
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/process.h"
#include "support/server_process.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string model_dir() {
  const char* dir = std::getenv("CADRE_TINY_MODEL");
  return dir ? std::string(dir) + "/run" : "";
}

constexpr const char* kModel = "run";  // the fixture's run directory name
constexpr int kEos = 2;                // the tiny tokenizer's </s>

// A `cadre serve` on a free port; killed (group) when the test ends.
struct Server {
  explicit Server(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {CADRE_BIN, "serve", "--model", model_dir(), "--port", "0", "--threads", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<cadre::test::ServerProcess>(argv);
    const std::string port_text = process->wait_for("listening on http://127.0.0.1:", 120);
    if (port_text.empty()) throw std::runtime_error("cadre serve did not start:\n" + process->output());
    port = std::stoi(port_text);
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& headers = {}) const {
    return client().Post(path.c_str(), headers, body, "application/json");
  }
  // A metric's value from /metrics (-1 when absent).
  double metric(const std::string& name) const {
    auto r = client().Get("/metrics");
    if (!r) return -1;
    std::smatch m;
    if (std::regex_search(r->body, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return std::stod(m[1]);
    return -1;
  }
  std::unique_ptr<cadre::test::ServerProcess> process;
  int port = 0;
};

// A streaming request on a raw socket, so the test decides when to read and when to hang up.
class RawStream {
 public:
  // rcvbuf > 0: this socket's receive buffer (set before connecting, which also turns off the
  // kernel's growing of it), so that an unread response backs up into the server.
  RawStream(int port, const std::string& path, const std::string& body, int rcvbuf = 0, const std::string& headers = "") {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect failed");
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                                headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (send(fd_, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
      throw std::runtime_error("send failed");
  }
  ~RawStream() { close(); }
  // Reads until `text` has arrived (true) or the deadline / end of stream (false).
  bool read_until(const std::string& text, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (received_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || fd_ < 0) return false;
      timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>((left % 1000) * 1000)};
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      char buf[8192];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return received_.find(text) != std::string::npos;
      received_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  std::string received_;
};

// A completion that cannot end early: EOS is banned, so it runs for max_tokens.
std::string long_completion(int max_tokens, bool stream) {
  return json{{"model", kModel}, {"prompt", "The state of the Union"}, {"max_tokens", max_tokens},
              {"logit_bias", {{std::to_string(kEos), -100}}}, {"stream", stream}, {"temperature", 0}}
      .dump();
}

void expect_error(const httplib::Result& r, int status, const std::string& param, const std::string& what) {
  ASSERT_TRUE(r) << what << ": no response";
  EXPECT_EQ(r->status, status) << what << ": " << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << what << ": " << r->body;
  const json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << what;
  EXPECT_TRUE(e.contains("type") && e.contains("param") && e.contains("code")) << what << ": " << r->body;
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << what << ": " << r->body;
  }
}

class ServeHttp : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(model_dir().empty()) << "CADRE_TINY_MODEL is not set (ctest fixture tiny_model)"; }
};

TEST_F(ServeHttp, BadRequestsGetOpenAiErrorsAndTheServerStaysUp) {
  Server s;
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  expect_error(s.post(c, "{\"model\": \"run\", \"prompt\": "), 400, "", "truncated JSON");
  expect_error(s.post(c, "[1, 2]"), 400, "", "not an object");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "temperature": "hot"})"), 400, "temperature", "string temperature");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "max_tokens": 2.5})"), 400, "max_tokens", "fractional max_tokens");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "n": "2"})"), 400, "n", "string n");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "stop": 5})"), 400, "stop", "numeric stop");
  expect_error(s.post(c, R"({"model": "run", "prompt": 7})"), 400, "prompt", "numeric prompt");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "temperature": 3})"), 400, "temperature", "temperature 3");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "best_of": 3})"), 400, "best_of", "unsupported best_of");
  expect_error(s.post(c, R"({"model": "run", "prompt": "hi", "frobnicate": true})"), 400, "frobnicate", "unknown field");
  expect_error(s.post(c, R"({"model": "run", "prompt": [1, 99999]})"), 400, "prompt", "token id beyond the vocabulary");
  expect_error(s.post(chat, R"({"model": "run", "messages": "hi"})"), 400, "messages", "string messages");
  expect_error(s.post(chat, R"({"model": "run", "messages": [{"role": "robot", "content": "x"}]})"), 400,
               "messages[0].role", "bad role");
  expect_error(s.post(chat, R"({"model": "run", "messages": [{"role": "user", "content": "x"}], "tools": []})"), 400,
               "tools", "tools");
  expect_error(s.post(chat, R"({"model": "run", "messages": [{"role": "user", "content": "x"}],
                               "response_format": {"type": "json_schema"}})"), 400, "response_format", "json_schema");
  // What the chat template refuses (the built-in llama2: turns must alternate), in its own words.
  auto refused = s.post(chat, R"({"model": "run", "messages": [{"role": "user", "content": "a"},
                                                              {"role": "user", "content": "b"}]})");
  expect_error(refused, 400, "messages", "two user turns under the llama2 template");
  EXPECT_NE(refused->body.find("Conversation roles must alternate"), std::string::npos) << refused->body;
  expect_error(s.post(c, R"({"model": "gpt-4", "prompt": "hi"})"), 404, "model", "unknown model");
  // Longer than the context (1024 tokens): OpenAI's context_length_exceeded.
  std::string words;
  for (int i = 0; i < 1100; ++i) words += " nation";
  auto too_long = s.post(c, json{{"model", kModel}, {"prompt", words}, {"max_tokens", 4}}.dump());
  expect_error(too_long, 400, "prompt", "over-long prompt");
  EXPECT_NE(too_long->body.find("context_length_exceeded"), std::string::npos) << too_long->body;
  auto too_many = s.post(c, json{{"model", kModel}, {"prompt", "hi"}, {"max_tokens", 5000}}.dump());
  expect_error(too_many, 400, "prompt", "max_tokens beyond the context");
  // A body over the 1 MiB limit: 413 before it is parsed.
  expect_error(s.post(c, json{{"model", kModel}, {"prompt", std::string(2 << 20, 'a')}}.dump()), 413, "", "2 MiB body");
  expect_error(s.client().Get("/v1/nothing"), 404, "", "unknown route");
  // Still serving.
  auto ok = s.post(c, json{{"model", kModel}, {"prompt", "The Congress"}, {"max_tokens", 5}, {"temperature", 0}}.dump());
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  const json body = json::parse(ok->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

TEST_F(ServeHttp, ApiKeyIsCheckedWhenSet) {
  Server s({"--api-key", "s3cret"});
  const std::string body = json{{"model", kModel}, {"prompt", "The"}, {"max_tokens", 2}}.dump();
  auto none = s.post("/v1/completions", body);
  expect_error(none, 401, "", "no key");
  EXPECT_NE(none->body.find("invalid_api_key"), std::string::npos);
  expect_error(s.post("/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401, "", "wrong key");
  expect_error(s.client().Get("/v1/models"), 401, "", "models without a key");
  auto ok = s.post("/v1/completions", body, {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(s.client().Get("/health")->status, 200);  // health checks need no key
}

TEST_F(ServeHttp, FullQueueAnswers429) {
  Server s({"--max-batch", "1", "--max-queue", "1"});
  // The one slot: a long streamed completion, seen running once its first chunk arrived.
  RawStream running(s.port, "/v1/completions", long_completion(1000, true));
  ASSERT_TRUE(running.read_until("data: {", 60)) << running.received();
  // The one queue place: a second request, waiting (seen in /metrics).
  auto queued = std::async(std::launch::async, [&] { return s.post("/v1/completions", long_completion(3, false)); });
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (s.metric("cadre_serve_queue_depth") != 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(s.metric("cadre_serve_queue_depth"), 1);
  // A third has nowhere to go.
  auto refused = s.post("/v1/completions", long_completion(3, false));
  expect_error(refused, 429, "", "third request");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  ASSERT_EQ(running.received().find("[DONE]"), std::string::npos) << "the first request ended before the 429; the test "
                                                                       "did not exercise a full queue";
  running.close();  // frees the slot: the queued request runs
  auto second = queued.get();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200) << second->body;
  EXPECT_NE(s.client().Get("/metrics")->body.find("cadre_serve_requests_rejected_total{reason=\"queue_full\"} 1"),
            std::string::npos);
}

TEST_F(ServeHttp, ClientDisconnectFreesItsSlot) {
  Server s({"--max-batch", "1"});
  {
    RawStream gone(s.port, "/v1/completions", long_completion(1000, true));
    ASSERT_TRUE(gone.read_until("data: {", 60)) << gone.received();
  }  // hung up after the first chunk
  // With one slot, this runs only once the abandoned request left the batch.
  auto next = s.post("/v1/completions", long_completion(5, false));
  ASSERT_TRUE(next);
  ASSERT_EQ(next->status, 200) << next->body;
  EXPECT_EQ(s.metric("cadre_serve_requests_cancelled_total"), 1);
  // The abandoned request stopped long before its 1000 tokens.
  EXPECT_LT(s.metric("cadre_serve_generated_tokens_total"), 1000);
}

TEST_F(ServeHttp, ANonStreamingClientThatLeavesFreesItsSlot) {
  Server s({"--max-batch", "1"});
  {
    RawStream gone(s.port, "/v1/completions", long_completion(1000, false));
  }  // hung up at once: the whole answer is not waited for
  // The server notices (a 499 in /metrics) before the next request is sent, so that one cannot
  // simply have been served first.
  const std::string gone_499 = R"(cadre_serve_requests_total\{endpoint="/v1/completions",status="499"\})";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (s.metric(gone_499) != 1 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(s.metric(gone_499), 1) << "the departed client's request was not given up";
  auto next = s.post("/v1/completions", long_completion(5, false));
  ASSERT_TRUE(next);
  ASSERT_EQ(next->status, 200) << next->body;
  EXPECT_EQ(s.metric("cadre_serve_requests_cancelled_total"), 1);
  EXPECT_LT(s.metric("cadre_serve_generated_tokens_total"), 1000);
}

// SIGTERM: new requests get 503 while the admitted ones finish with every token, the usage and
// `data: [DONE]`, then the process exits 0. The stream in flight is ~11 MB (32 choices x 300
// tokens x 20 top log-probabilities) and its client reads nothing until after the 503 check,
// with an 8 KB receive buffer: more than the server's socket can hold (Linux's tcp_wmem caps a
// send buffer at 4 MB by default), so the server is still writing it — alive, draining — when
// the new request arrives, on any machine's speed.
TEST_F(ServeHttp, SigtermDrainsRequestsInFlight) {
  Server s;
  const json big = {{"model", kModel},
                    {"messages", {{{"role", "user"}, {"content", "The state of the Union"}}}},
                    {"max_tokens", 300},
                    {"n", 32},
                    {"logprobs", true},
                    {"top_logprobs", 20},
                    {"logit_bias", {{std::to_string(kEos), -100}}},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  RawStream running(s.port, "/v1/chat/completions", big.dump(), 4096);
  ASSERT_TRUE(running.read_until("data: {", 60)) << running.received();
  s.process->signal(SIGTERM);
  EXPECT_FALSE(s.process->wait_for("draining", 30).empty()) << s.process->output();
  // Draining, not gone: new work is refused with 503, and /health says so.
  expect_error(s.post("/v1/completions", long_completion(2, false)), 503, "", "a request during the drain");
  auto health = s.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503) << health->body;
  // The request in flight completes with every token, its usage and the end marker.
  ASSERT_TRUE(running.read_until("data: [DONE]", 300)) << running.received().substr(0, 2000);
  EXPECT_GT(running.received().size(), size_t{5} << 20) << "the stream is smaller than the server's socket buffer";
  EXPECT_NE(running.received().find("\"completion_tokens\":9600"), std::string::npos);
  EXPECT_EQ(s.process->wait_exit(60), 0) << s.process->output();
  EXPECT_NE(s.process->output().find("drained"), std::string::npos) << s.process->output();
}

// A batching wait (--batch-wait-ms, here 10 minutes) ends at once on SIGTERM: the queued request
// runs and the server exits 0, well inside --drain-timeout.
TEST_F(ServeHttp, SigtermEndsABatchingWaitAtOnce) {
  Server s({"--max-batch", "4", "--batch-wait-ms", "600000", "--drain-timeout", "60"});
  RawStream waiting(s.port, "/v1/completions", long_completion(5, true));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (s.metric("cadre_serve_queue_depth") != 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(s.metric("cadre_serve_queue_depth"), 1) << "the request is not waiting for a batch";
  s.process->signal(SIGTERM);
  ASSERT_TRUE(waiting.read_until("data: [DONE]", 45)) << waiting.received() << s.process->output();
  EXPECT_EQ(s.process->wait_exit(45), 0) << s.process->output();
}

// The batching wait counts sequences: one request of n = --max-batch fills the batch by itself.
TEST_F(ServeHttp, ABatchingWaitCountsSequencesNotRequests) {
  Server s({"--max-batch", "4", "--batch-wait-ms", "600000"});
  auto c = s.client();
  c.set_read_timeout(60, 0);
  json body = json::parse(long_completion(3, false));
  body["n"] = 4;
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r) << "no answer within 60 s: the request waited for more requests";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"].size(), 4u);
}

TEST_F(ServeHttp, AQueueOfZeroIsRefusedAtStart) {
  auto r = cadre::test::run_process({CADRE_BIN, "serve", "--model", model_dir(), "--max-queue", "0"}, {}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-queue must be >= 1"), std::string::npos) << r.output;
}

// The HTTP limits' flags: a bad value exits 2 naming the flag, before the model is loaded.
TEST_F(ServeHttp, BadHttpLimitsExit2NamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-connections", "0"}, "--max-connections must be in 1..65536"},
      {{"--max-connections-per-client", "-1"}, "--max-connections-per-client must be in 0..65536"},
      {{"--max-header-kib", "0"}, "--max-header-kib must be in 1..1024"},
      {{"--max-body-kib", "2000000"}, "--max-body-kib must be <= 1048576"},
      {{"--header-timeout", "0"}, "--header-timeout must be in (0, 86400] seconds"},
      {{"--body-timeout", "-1"}, "--body-timeout must be in (0, 86400] seconds"},
      {{"--idle-timeout", "1e9"}, "--idle-timeout must be in (0, 86400] seconds"},
      {{"--send-timeout", "0"}, "--send-timeout must be in (0, 86400] seconds"},
      {{"--send-timeout", "soon"}, "--send-timeout"},
      {{"--proxy-protocol"}, "--proxy-protocol needs --trusted-proxies"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {CADRE_BIN, "serve", "--model", model_dir()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = cadre::test::run_process(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

// CUDA_VISIBLE_DEVICES empty hides every GPU, on any machine and build.
TEST_F(ServeHttp, CudaWithoutAVisibleGpuIsRefusedAtStartNamingTheFlag) {
  auto r = cadre::test::run_process({CADRE_BIN, "serve", "--model", model_dir(), "--device", "cuda"},
                                    {"CUDA_VISIBLE_DEVICES="}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device: cuda was asked for, but"), std::string::npos) << r.output;
}

// Behind a load balancer every client arrives from its address: with it trusted
// (--trusted-proxies), 100 streaming clients at once through that one address are all served
// under the default cap of 64 per client, each counted as the client its X-Forwarded-For names.
// Untrusted, the same 100 are one client: the 65th connection is refused 429.
TEST_F(ServeHttp, HundredStreamingClientsThroughOneTrustedProxyAreServed) {
  for (bool trusted : {true, false}) {
    SCOPED_TRACE(trusted ? "trusted proxy" : "no trusted proxy");
    std::vector<std::string> extra = {"--max-queue", "128"};
    if (trusted) extra.insert(extra.end(), {"--trusted-proxies", "127.0.0.1"});
    Server s(extra);
    std::vector<std::unique_ptr<RawStream>> streams;
    for (int k = 0; k < 100; ++k)
      streams.push_back(std::make_unique<RawStream>(s.port, "/v1/completions", long_completion(4, true), 0,
                                                    "X-Forwarded-For: 198.51.100." + std::to_string(k) + "\r\n"));
    int done = 0, refused = 0;
    for (auto& stream : streams) {
      stream->read_until(trusted ? "data: [DONE]" : "\r\n\r\n", 120);
      if (stream->received().find("data: [DONE]") != std::string::npos) ++done;
      if (stream->received().rfind("HTTP/1.1 429", 0) == 0) ++refused;
    }
    if (trusted) {
      EXPECT_EQ(done, 100);
      EXPECT_EQ(refused, 0);
    } else {
      EXPECT_EQ(refused, 36) << "connections 65..100 from 127.0.0.1";
      for (int k = 64; k < 100; ++k)
        EXPECT_EQ(streams[size_t(k)]->received().rfind("HTTP/1.1 429", 0), 0u) << k << ": " << streams[size_t(k)]->received();
    }
  }
}

TEST_F(ServeHttp, MetricsAreValidPrometheusText) {
  Server s;
  for (bool stream : {false, true}) {
    // EOS banned: each request generates exactly its 4 tokens, whatever it samples.
    auto r = s.post("/v1/chat/completions", json{{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                 {"max_tokens", 4}, {"stream", stream},
                                                 {"logit_bias", {{std::to_string(kEos), -100}}}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  // A stream is counted once its last byte is written, which its client can read first: wait
  // for the count (an event, with a deadline), then check the text.
  const std::string both_counted = "cadre_serve_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2";
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (s.client().Get("/metrics")->body.find(both_counted) == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  cadre::test::TempDir dir("serve-metrics");
  cadre::test::write_text(dir / "metrics.txt", m->body);
  auto check = cadre::test::run_process({"sh", "-c", "promtool check metrics < " + (dir / "metrics.txt")});
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << m->body;
  for (const char* name : {"cadre_serve_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2",
                           "cadre_serve_time_to_first_token_seconds_count 2", "cadre_serve_queue_depth 0",
                           "cadre_serve_generated_tokens_total 8"})
    EXPECT_NE(m->body.find(name), std::string::npos) << name << "\n" << m->body;
  // The server's resident memory: its own /proc/self/status VmRSS, at least its weights.
  const double rss = s.metric("process_resident_memory_bytes");
  EXPECT_GT(rss, 0.6e6) << "the tiny model's float32 weights alone are 0.66 MB\n" << m->body;
  EXPECT_LT(rss, 4e9) << m->body;
}

// A completion of `prompt` that runs for exactly max_tokens (EOS banned), greedy.
std::string greedy_completion(const std::string& prompt, int max_tokens) {
  return json{{"model", kModel}, {"prompt", prompt}, {"max_tokens", max_tokens},
              {"logit_bias", {{std::to_string(kEos), -100}}}, {"temperature", 0}}
      .dump();
}

// Three requests sent together (a batching wait holds the first step until all are queued).
std::vector<std::string> three_texts(const Server& s) {
  const std::vector<std::string> prompts = {"The state of the Union", "Once upon a time", "In the beginning"};
  std::vector<std::future<httplib::Result>> answers;
  for (const auto& p : prompts)
    answers.push_back(std::async(std::launch::async, [&s, p] { return s.post("/v1/completions", greedy_completion(p, 200)); }));
  std::vector<std::string> texts;
  for (auto& a : answers) {
    auto r = a.get();
    if (!r || r->status != 200)
      throw std::runtime_error("a request failed: " + (r ? r->body : httplib::to_string(r.error())) + "\nserver output:\n" +
                               s.process->output());
    texts.push_back(json::parse(r->body)["choices"][0]["text"]);
  }
  return texts;
}

// The tiny model's cache: (key, value) x 2 layers x 2 kv heads x head_dim 16 x float32 = 512
// bytes a token, blocks of 256 tokens (128 KiB). A budget of 256 KiB holds two blocks: two of
// the three requests (each ~6 prompt tokens + 200) run, the third waits for one of them
// (counted once, at the step that admits the first two), and the tokens are those of a server
// without a budget. A request whose prompt + max_tokens takes three blocks is refused.
TEST_F(ServeHttp, TheKvCacheBudgetQueuesWhatFitsLaterAndRefusesWhatNeverFits) {
  const std::vector<std::string> batching = {"--max-batch", "3", "--batch-wait-ms", "600000"};
  std::vector<std::string> unbudgeted;
  {
    Server s(batching);
    unbudgeted = three_texts(s);
    EXPECT_EQ(s.metric("cadre_serve_kv_cache_waits_total"), 0);
    EXPECT_EQ(s.metric("cadre_serve_kv_cache_peak_bytes"), 3 * 256 * 512);
  }
  std::vector<std::string> flags = batching;
  flags.insert(flags.end(), {"--kv-cache-memory", "256KiB"});
  Server s(flags);
  EXPECT_NE(s.process->output().find("= 512 tokens of 512 bytes"), std::string::npos) << s.process->output();
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_budget_bytes"), 262144);
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_bytes"), 0) << "nothing is allocated before a request";
  EXPECT_EQ(three_texts(s), unbudgeted) << "the budget changed the tokens";
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_waits_total"), 1) << "the third request did not wait for the cache";
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_peak_bytes"), 262144) << "the cache held more than its budget, or less than "
                                                                    "two requests at once";
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_bytes"), 0) << "finished sequences keep their blocks";
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_reserved_bytes"), 0);
  // Never fits: 3 blocks for one sequence, or a chat without max_tokens (the rest of the 1024-token
  // context). The message names the budget and the max_tokens that would fit.
  auto r = s.post("/v1/completions", greedy_completion("The state of the Union", 600));
  expect_error(r, 400, "max_tokens", "600 tokens");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "kv_cache_budget_exceeded") << r->body;
  EXPECT_NE(r->body.find("KV-cache budget of 512 tokens (--kv-cache-memory)"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("Set max_tokens to at most"), std::string::npos) << r->body;
  r = s.post("/v1/chat/completions",
             json{{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}}}.dump());
  expect_error(r, 400, "max_tokens", "chat without max_tokens");
  EXPECT_NE(s.client().Get("/metrics")->body.find("cadre_serve_requests_rejected_total{reason=\"kv_cache_budget\"} 2"),
            std::string::npos);
  // Still serving, the same tokens (a batching wait: three requests again).
  EXPECT_EQ(three_texts(s), unbudgeted);
}

// A thousand slots of the whole 1024-token context would be 512 MiB of float32 cache up front;
// the cache grows with the tokens held, so the server starts at its usual size.
TEST_F(ServeHttp, AThousandSlotsTakeNoCacheMemoryUntilUsed) {
  Server s({"--max-batch", "1024"});
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_bytes"), 0);
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_budget_bytes"), 1024.0 * 1024 * 512);
  const double rss = s.metric("process_resident_memory_bytes");
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 400e6) << "512 MiB of cache would put the server above 537 MB";
  auto r = s.post("/v1/completions", long_completion(3, false));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.metric("cadre_serve_kv_cache_peak_bytes"), 256 * 512) << "one request: one block";
}

}  // namespace
