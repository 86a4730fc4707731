// Progress line implementation.
#include "core/progress.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

namespace cadre {
namespace {
std::atomic<bool> g_line_showing{false};

void write_stderr(const std::string& s) {
  ssize_t ignored = ::write(STDERR_FILENO, s.data(), s.size());
  (void)ignored;
}

std::string format_rate(double rate) {
  char buf[32];
  if (rate >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", rate / 1e6);
  else if (rate >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", rate / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f", rate);
  return buf;
}
}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

void progress_clear_line() {
  if (g_line_showing.exchange(false)) write_stderr("\r\033[K");
}

Progress::Progress(std::string label, int64_t total, std::string unit, double min_interval_s, int64_t initial)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), done_(initial), initial_(initial),
      min_interval_s_(min_interval_s), start_(std::chrono::steady_clock::now()),
      last_draw_(start_), tty_(isatty(STDERR_FILENO) != 0) {
  // Plain lines in logs are kept sparse: one every 10 s at most.
  if (!tty_ && min_interval_s_ < 10.0) min_interval_s_ = 10.0;
}

Progress::~Progress() {
  if (!finished_ && drew_) progress_clear_line();
}

void Progress::update(int64_t done, const std::string& extra) {
  done_ = done;
  extra_ = extra;
  auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_draw_).count() < min_interval_s_) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  if (total_ > 0) done_ = total_;
  if (!extra.empty()) extra_ = extra;
  draw(true);
}

void Progress::draw(bool final_line) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? (done_ - initial_) / elapsed : 0;
  std::string line = label_ + " " + std::to_string(done_);
  if (total_ > 0) {
    char pct[16];
    std::snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * done_ / total_);
    line += "/" + std::to_string(total_) + pct;
  }
  line += " " + format_rate(rate) + " " + unit_ + "/s";
  if (final_line) line += " in " + format_duration(elapsed);
  else if (total_ > 0 && rate > 0) line += " ETA " + format_duration((total_ - done_) / rate);
  if (!extra_.empty()) line += " | " + extra_;
  drew_ = true;
  if (tty_) {
    write_stderr("\r\033[K" + line + (final_line ? "\n" : ""));
    g_line_showing = !final_line;
  } else {
    write_stderr(line + "\n");
  }
}

}  // namespace cadre
