// The server's Prometheus metrics (text exposition format, GET /metrics): requests by
// endpoint and status, prompt and generated tokens, time to first token and request duration
// histograms, decode-step batch sizes, queue depth, active sequences, cancelled and rejected
// requests, and generated tokens per second over the last 10 seconds. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cadre {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double value);
  // Lines of `name` with cumulative buckets, sum and count.
  std::string text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void request_done(const std::string& endpoint, int status, double seconds);
  void tokens(int64_t prompt, int64_t generated);
  void first_token(double seconds);
  // A decoding step of `sequences` running sequences; `models` distinct ones among the base and
  // the LoRA adapters its rows ran with.
  void step(int64_t sequences, int64_t generated, int64_t models = 1);
  void cancelled();
  void rejected(const std::string& reason);
  void set_queue(int64_t queued, int64_t active);
  // The KV cache: its budget (0: none), what it holds now and at most so far, and what the
  // running sequences reserved of the budget.
  void set_kv_cache_budget(int64_t bytes);
  void set_kv_cache(int64_t bytes, int64_t peak_bytes, int64_t reserved_bytes);
  void waited_for_kv_cache();  // a request found slots free but not the cache
  std::string text() const;

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> rejected_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0, steps_ = 0, mixed_steps_ = 0;
  int64_t queued_ = 0, active_ = 0;
  int64_t kv_budget_bytes_ = 0, kv_bytes_ = 0, kv_peak_bytes_ = 0, kv_reserved_bytes_ = 0;
  uint64_t kv_waits_ = 0;
  Histogram ttft_, duration_, batch_;
  mutable std::deque<std::pair<Clock::time_point, int64_t>> recent_;  // (step time, tokens)
};

}  // namespace cadre
