// Prometheus exposition of the server's counters, gauges and histograms.
#include "serve/metrics.h"

#include <cstdio>
#include <sstream>

namespace cadre {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name) const {
  std::ostringstream out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{le=\"" << num(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n" << name << "_sum " << num(sum_) << "\n"
      << name << "_count " << count_ << "\n";
  return out.str();
}

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

void ServeMetrics::step(int64_t sequences, int64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++steps_;
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

std::string ServeMetrics::text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
  int64_t recent_tokens = 0;
  for (const auto& [t, n] : recent_) recent_tokens += n;
  std::ostringstream out;
  header(out, "cadre_serve_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests_)
    out << "cadre_serve_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << "\n";
  header(out, "cadre_serve_requests_rejected_total", "counter", "Requests refused before running, by reason.");
  for (const auto& [reason, n] : rejected_) out << "cadre_serve_requests_rejected_total{reason=\"" << reason << "\"} " << n << "\n";
  header(out, "cadre_serve_requests_cancelled_total", "counter", "Requests whose client went away before the end.");
  out << "cadre_serve_requests_cancelled_total " << cancelled_ << "\n";
  header(out, "cadre_serve_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  out << "cadre_serve_prompt_tokens_total " << prompt_tokens_ << "\n";
  header(out, "cadre_serve_generated_tokens_total", "counter", "Tokens generated.");
  out << "cadre_serve_generated_tokens_total " << generated_tokens_ << "\n";
  header(out, "cadre_serve_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.");
  out << "cadre_serve_tokens_per_second " << num(recent_tokens / 10.0) << "\n";
  header(out, "cadre_serve_queue_depth", "gauge", "Requests waiting for a decoding slot.");
  out << "cadre_serve_queue_depth " << queued_ << "\n";
  header(out, "cadre_serve_active_sequences", "gauge", "Sequences being decoded.");
  out << "cadre_serve_active_sequences " << active_ << "\n";
  header(out, "cadre_serve_decode_steps_total", "counter", "Decoding steps run.");
  out << "cadre_serve_decode_steps_total " << steps_ << "\n";
  header(out, "cadre_serve_time_to_first_token_seconds", "histogram", "From admission to the queue to the first token.");
  out << ttft_.text("cadre_serve_time_to_first_token_seconds");
  header(out, "cadre_serve_request_duration_seconds", "histogram", "Successful requests, from arrival to the last byte.");
  out << duration_.text("cadre_serve_request_duration_seconds");
  header(out, "cadre_serve_batch_size", "histogram", "Sequences sharing each decoding step.");
  out << batch_.text("cadre_serve_batch_size");
  return out.str();
}

}  // namespace cadre
