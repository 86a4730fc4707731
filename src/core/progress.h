// Progress line for long work: done/total, rate, ETA; redrawn in place on a terminal,
// printed as periodic plain lines when stderr is a file or pipe (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cadre {

class Progress {
 public:
  // `unit` names what is counted ("tok", "step"); `min_interval_s` throttles redraws.
  // `initial`: already done before this process started (a resumed run); the rate and ETA
  // count only what is done from here.
  Progress(std::string label, int64_t total, std::string unit, double min_interval_s = 0.5, int64_t initial = 0);
  ~Progress();

  // Sets the absolute count and an optional free-form suffix (e.g. "loss 3.21").
  void update(int64_t done, const std::string& extra = "");
  void finish(const std::string& extra = "");

 private:
  void draw(bool final_line);

  std::string label_, unit_, extra_;
  int64_t total_, done_ = 0, initial_ = 0;
  double min_interval_s_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool tty_, finished_ = false, drew_ = false;
};

// Formats seconds as 1h02m, 3m05s or 12s.
std::string format_duration(double seconds);
// Clears a live progress line, if one is showing, before other output goes to stderr.
void progress_clear_line();

}  // namespace cadre
