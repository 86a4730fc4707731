// The server's counters, gauges and histograms, exposed through obs/prometheus_text.
#include "serve/metrics.h"

#include <tuple>
#include <vector>

#include "core/sysinfo.h"
#include "obs/prometheus_text.h"

namespace cadre {

using obs::family_header;
using obs::sample_line;

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
}

std::string Histogram::text(const std::string& name) const { return obs::histogram_lines(name, bounds_, counts_, sum_); }

ServeMetrics::ServeMetrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      duration_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}),
      batch_({1, 2, 4, 8, 16, 24, 32, 48, 64, 128}) {}

void ServeMetrics::request_done(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  if (status == 200) duration_.observe(seconds);
}

void ServeMetrics::tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void ServeMetrics::first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServeMetrics::step(int64_t sequences, int64_t generated, int64_t models) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++steps_;
  if (models >= 2) ++mixed_steps_;
  batch_.observe(static_cast<double>(sequences));
  const auto now = Clock::now();
  recent_.push_back({now, generated});
  while (now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
}

void ServeMetrics::cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cancelled_;
}

void ServeMetrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++rejected_[reason];
}

void ServeMetrics::set_queue(int64_t queued, int64_t active) {
  std::lock_guard<std::mutex> lock(mutex_);
  queued_ = queued;
  active_ = active;
}

void ServeMetrics::set_kv_cache_budget(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  kv_budget_bytes_ = bytes;
}

void ServeMetrics::set_kv_cache(int64_t bytes, int64_t peak_bytes, int64_t reserved_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  kv_bytes_ = bytes;
  kv_peak_bytes_ = peak_bytes;
  kv_reserved_bytes_ = reserved_bytes;
}

void ServeMetrics::waited_for_kv_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++kv_waits_;
}

std::string ServeMetrics::text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
  int64_t recent_tokens = 0;
  for (const auto& [t, n] : recent_) recent_tokens += n;
  std::string out = family_header("cadre_serve_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests_)
    out += sample_line("cadre_serve_requests_total", {{"endpoint", key.first}, {"status", std::to_string(key.second)}},
                       static_cast<double>(n));
  out += family_header("cadre_serve_requests_rejected_total", "counter", "Requests refused before running, by reason.");
  for (const auto& [reason, n] : rejected_)
    out += sample_line("cadre_serve_requests_rejected_total", {{"reason", reason}}, static_cast<double>(n));
  // (name, type, help, value) of the families with one unlabelled sample.
  const std::vector<std::tuple<const char*, const char*, const char*, double>> singles = {
      {"cadre_serve_requests_cancelled_total", "counter", "Requests whose client went away before the end.",
       static_cast<double>(cancelled_)},
      {"cadre_serve_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
       static_cast<double>(prompt_tokens_)},
      {"cadre_serve_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(generated_tokens_)},
      {"cadre_serve_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.",
       recent_tokens / 10.0},
      {"cadre_serve_queue_depth", "gauge", "Requests waiting for a decoding slot.", static_cast<double>(queued_)},
      {"cadre_serve_active_sequences", "gauge", "Sequences being decoded.", static_cast<double>(active_)},
      {"cadre_serve_decode_steps_total", "counter", "Decoding steps run.", static_cast<double>(steps_)},
      {"cadre_serve_mixed_adapter_steps_total", "counter",
       "Decoding steps whose rows ran with two or more models (the base and LoRA adapters, --lora).",
       static_cast<double>(mixed_steps_)},
      {"cadre_serve_kv_cache_bytes", "gauge", "KV cache held by the running sequences.", static_cast<double>(kv_bytes_)},
      {"cadre_serve_kv_cache_peak_bytes", "gauge", "The most KV cache held at once since the start.",
       static_cast<double>(kv_peak_bytes_)},
      {"cadre_serve_kv_cache_reserved_bytes", "gauge",
       "KV cache the running sequences may come to hold (prompt + max_tokens each).", static_cast<double>(kv_reserved_bytes_)},
      {"cadre_serve_kv_cache_budget_bytes", "gauge", "The KV-cache budget (--kv-cache-memory); 0: none.",
       static_cast<double>(kv_budget_bytes_)},
      {"cadre_serve_kv_cache_waits_total", "counter", "Requests that waited for KV-cache budget while slots were free.",
       static_cast<double>(kv_waits_)},
      {"process_resident_memory_bytes", "gauge", "Resident memory of the server process (VmRSS).",
       static_cast<double>(process_rss_bytes())},
  };
  for (const auto& [name, type, help, value] : singles) out += family_header(name, type, help) + sample_line(name, {}, value);
  const std::vector<std::tuple<const char*, const char*, const Histogram*>> histograms = {
      {"cadre_serve_time_to_first_token_seconds", "From admission to the queue to the first token.", &ttft_},
      {"cadre_serve_request_duration_seconds", "Successful requests, from arrival to the last byte.", &duration_},
      {"cadre_serve_batch_size", "Sequences sharing each decoding step.", &batch_},
  };
  for (const auto& [name, help, histogram] : histograms) out += family_header(name, "histogram", help) + histogram->text(name);
  return out;
}

}  // namespace cadre
