// Follows a run's metrics.jsonl while a job runs and splits it into segments, one per stretch of
// training: a restarted round either rewrites the file from step 1 (fresh start) or cuts it back
// to its checkpoint's step and appends from there (resume); a record that does not follow the
// previous one, a rewrite, a cut or start_segment() (the caller saw a new round) begins a new
// segment. Every record keeps the time the watcher first saw it, which is how the fault tests
// measure recovery time to within the polling interval.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cadre::netfault {

using Clock = std::chrono::steady_clock;

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  Clock::time_point seen;
};

struct Segment {
  std::vector<StepRecord> steps;
  int64_t world_size = 0;  // filled in by the caller (from the launcher's round line)
  int64_t first_step() const { return steps.empty() ? 0 : steps.front().step; }
  int64_t last_step() const { return steps.empty() ? 0 : steps.back().step; }
};

class MetricsWatch {
 public:
  explicit MetricsWatch(std::string path) : path_(std::move(path)) {}
  // Reads what is new in the file; returns true when something was added. Call often.
  bool poll();
  // The next record begins a new segment.
  void start_segment() { new_segment_ = true; }
  const std::vector<Segment>& segments() const { return segments_; }
  std::vector<Segment>& segments() { return segments_; }

 private:
  void add(const std::string& line, Clock::time_point now);

  std::string path_;
  std::string seen_;  // complete lines read so far from the current file contents
  bool new_segment_ = false;  // the file was rewritten: the next record starts a segment
  std::vector<Segment> segments_;
};

}  // namespace cadre::netfault
