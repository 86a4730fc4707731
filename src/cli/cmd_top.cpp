// `cadre top SOURCE...`: a live view of a running job, one row per rank, refreshed in place with
// plain ANSI (works over SSH); q quits. SOURCE is an agent's metrics URL (cadre run
// --metrics-port), host:port, or a run directory (its agent's metrics.url when one serves,
// else rank 0's metrics.jsonl).
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "obs/exposition_parse.h"
#include "obs/metrics_fetch.h"
#include "obs/top_view.h"

namespace cadre {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

// Raw keys, no echo, the alternate screen and a hidden cursor while it lives; all restored after.
class Terminal {
 public:
  Terminal() {
    interactive_ = ::isatty(0) && ::isatty(1);
    if (!interactive_) return;
    ::tcgetattr(0, &saved_);
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    ::tcsetattr(0, TCSANOW, &raw);
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);
    std::fflush(stdout);
  }
  ~Terminal() {
    if (!interactive_) return;
    std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    ::tcsetattr(0, TCSANOW, &saved_);
  }
  bool interactive() const { return interactive_; }
  int width() const {
    winsize ws{};
    return ::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 120;
  }
  // Waits up to `seconds` for a key; true when q (or Q) was pressed.
  bool quit_pressed(double seconds) const {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until && !g_signal) {
      pollfd p{0, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char c = 0;
        if (::read(0, &c, 1) == 1 && (c == 'q' || c == 'Q')) return true;
      }
    }
    return false;
  }

 private:
  bool interactive_ = false;
  termios saved_{};
};

struct Source {
  bool http = false;
  obs::MetricsUrl url;
  std::string dir;  // a run directory: metrics.jsonl when its agent does not answer
};

Source source_parse(const std::string& text) {
  Source s;
  if (std::filesystem::is_directory(text)) {
    // A run directory: its agent's endpoint when one serves it (the demo's logs live inside).
    for (const std::string& file : {text + "/logs/metrics.url", text + "/metrics.url"}) {
      std::ifstream in(file);
      std::string url;
      if (in && std::getline(in, url) && !url.empty()) {
        s.http = true;
        s.url = obs::metrics_url_parse(url);
        break;
      }
    }
    CADRE_CONFIG_CHECK(s.http || std::filesystem::exists(text + "/metrics.jsonl"), "'", text,
                       "' has neither metrics.jsonl nor an agent's metrics.url: not a run or log directory");
    if (std::filesystem::exists(text + "/metrics.jsonl")) s.dir = text;
    return s;
  }
  s.http = true;
  s.url = obs::metrics_url_parse(text);
  return s;
}

obs::TopModel collect(const std::vector<Source>& sources) {
  obs::TopModel model;
  std::vector<obs::ParsedSample> samples;
  std::string errors, names;
  for (const auto& s : sources) {
    if (s.http) {
      try {
        auto parsed = obs::exposition_parse(obs::metrics_fetch(s.url));
        samples.insert(samples.end(), parsed.begin(), parsed.end());
        names += (names.empty() ? "" : " ") + s.url.text();
        continue;
      } catch (const Error& e) {
        // A run directory's agent may be gone (the run ended): its metrics.jsonl still tells.
        if (s.dir.empty()) errors += str(errors.empty() ? "" : "; ", e.what());
      }
    }
    if (!s.dir.empty()) {
      model = obs::top_model_from_run_dir(s.dir);
      names += (names.empty() ? "" : " ") + s.dir + "/metrics.jsonl";
    }
  }
  if (!samples.empty()) model = obs::top_model_from_samples(samples);
  model.source = names;
  if (!errors.empty()) {
    if (samples.empty() && model.rows.empty()) throw Error(errors);
    model.source += "  [" + errors + "]";
  }
  return model;
}

std::string clock_text() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

}  // namespace

int cmd_top(const Args& args) {
  double interval = 1;
  bool once = false;
  Flags flags(
      "cadre top [--interval S] [--once] SOURCE...\n"
      "  live view of a running job, one row per rank; q quits. SOURCE: an agent's metrics URL\n"
      "  (cadre run --metrics-port; http://host:port/metrics or host:port; one per node), or a run directory");
  flags.add("--interval", &interval, "seconds between refreshes (default 1)");
  flags.add("--once", &once, "print one screen and exit (also when output is not a terminal)");
  std::vector<std::string> texts = flags.parse(args);
  CADRE_CONFIG_CHECK(!texts.empty(), "no source given\n", flags.usage());
  CADRE_CONFIG_CHECK(interval >= 0.1, "--interval must be at least 0.1 s, got ", interval);
  std::vector<Source> sources;
  for (const auto& t : texts) sources.push_back(source_parse(t));

  Terminal terminal;
  if (once || !terminal.interactive()) {
    for (const auto& line : obs::top_render(collect(sources), 0, clock_text())) std::printf("%s\n", line.c_str());
    return 0;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  do {
    std::vector<std::string> lines;
    try {
      lines = obs::top_render(collect(sources), terminal.width(), clock_text());
    } catch (const Error& e) {
      lines = {str("cadre top  ", clock_text(), "   (q quits)"), "", str("cannot read: ", e.what()),
               "retrying every ", std::to_string(interval), " s"};
    }
    std::string screen = "\x1b[H";  // home, then each line cleared to its end, then the rest below
    for (const auto& line : lines) screen += line + "\x1b[K\r\n";
    screen += "\x1b[J";
    std::fwrite(screen.data(), 1, screen.size(), stdout);
    std::fflush(stdout);
  } while (!terminal.quit_pressed(interval) && !g_signal);
  return 0;
}

}  // namespace cadre
