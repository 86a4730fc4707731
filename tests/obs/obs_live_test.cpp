// Observability on real runs: `cadre run` with 2 or 3 workers training the tiny Llama, scraped by
// a real Prometheus (queried back over its HTTP API) and checked by promtool; `cadre top` under
// tmux (send-keys, capture-pane); `cadre report` rendered by headless Chromium; a rank stopped
// with SIGSTOP named in the agent's error file with the op and sequence number, and named the
// same by PyTorch's own flight-recorder analyzer (fr_trace, the project venv's torch) reading
// the PyTorch-format dumps written beside Cadre's; a stopped rank's group restarted by the
// agent (--stall-action restart) and finishing with an uninterrupted run's losses; a rank slowed
// by a stop/continue duty cycle named as a compute-bound straggler. Every process is killed and
// reaped however a test ends (agents by their Proc, workers with their agent, tmux and
// Chromium by guards, stopped ranks continued first).
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "core/file_util.h"
#include "launch/launch_harness.h"
#include "core/error.h"
#include "obs/exposition_parse.h"
#include "obs/flight_recorder.h"
#include "obs/metric_catalog.h"
#include "obs/metrics_fetch.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

using launch_test::free_port;
using launch_test::Proc;
using launch_test::read_file;
using launch_test::wait_until;

namespace {

std::string g_data;  // prepared once per process

class ObsLive : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new cadre::test::TempDir("obs-live-data");
    g_data = cadre::test::prepare_tiny_dataset(data_dir_->path(), 6, 30000);
  }
  static void TearDownTestSuite() { delete data_dir_; }

  void SetUp() override { dir_ = std::make_unique<launch_test::TempDir>(); }

  // `cadre run` of `nproc` tiny-Llama workers into run directory `run`, extra agent flags first.
  std::unique_ptr<Proc> start_job(const std::string& run, int nproc, std::vector<std::string> agent_flags,
                                  std::vector<std::string> sets, const std::vector<std::string>& train_flags = {}) {
    std::vector<std::string> argv = {CADRE_BIN, "run", "--nproc-per-node", std::to_string(nproc), "--log-dir",
                                     path(run + "-logs"), "--rdzv-id", "obs-test"};
    argv.insert(argv.end(), agent_flags.begin(), agent_flags.end());
    for (const char* a : {"--", CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml"}) argv.push_back(a);
    sets.insert(sets.begin(), {"data.dir=" + g_data, "run.dir=" + path(run), "train.threads=1"});
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    argv.insert(argv.end(), train_flags.begin(), train_flags.end());
    return std::make_unique<Proc>(argv, path(run + "-agent.log"));
  }

  std::string path(const std::string& name) const { return dir_->path + "/" + name; }

  static std::vector<nlohmann::json> jsonl(const std::string& file) {
    std::vector<nlohmann::json> out;
    std::istringstream in(read_file(file));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object()) out.push_back(j);
    }
    return out;
  }

  // The worker pid of `rank`, from its flight recorder (the file the agent gave it).
  static pid_t worker_pid(const std::string& logs, int rank) {
    std::string file = logs + "/round_0/rank_" + std::to_string(rank) + "/flight_recorder.bin";
    pid_t pid = 0;
    wait_until([&] {
      try {
        pid = cadre::obs::flight_recorder_read_file(file).pid;
      } catch (const cadre::Error&) {
      }
      return pid > 0;
    }, 60);
    return pid;
  }

  static cadre::test::TempDir* data_dir_;
  std::unique_ptr<launch_test::TempDir> dir_;
};
cadre::test::TempDir* ObsLive::data_dir_ = nullptr;

std::string fetch(int port, const std::string& path = "/metrics") {
  cadre::obs::MetricsUrl url{"127.0.0.1", port, path};
  try {
    return cadre::obs::metrics_fetch(url, 2);
  } catch (const cadre::Error&) {
    return "";
  }
}

// Runs a command; returns its exit code and combined output.
cadre::test::RunResult sh(const std::string& command, double timeout_s = 60) {
  return cadre::test::run_process({"bash", "-c", command}, {}, timeout_s);
}

// A stopped worker is continued (and then dies with its agent) however the test ends.
struct ContinueOnExit {
  pid_t pid;
  ~ContinueOnExit() {
    if (pid > 0) ::kill(pid, SIGCONT);
  }
};

}  // namespace

TEST_F(ObsLive, PrometheusScrapesATwoWorkerRunAndAnswersAQuery) {
  const int port = free_port();
  auto job = start_job("prom", 2, {"--metrics-port", std::to_string(port)},
                       {"train.steps=100000", "checkpoint.interval=20", "train.eval_interval=10"});
  // Both workers have reported a checkpoint and a validation loss.
  std::string text;
  ASSERT_TRUE(wait_until([&] {
    text = fetch(port);
    return text.find("cadre_checkpoint_saves_total{job=\"obs-test\",node=") != std::string::npos &&
           std::regex_search(text, std::regex(R"(cadre_validation_loss\{[^}]*rank="1")")) &&
           std::regex_search(text, std::regex(R"(cadre_worker_cpu_utilization_ratio\{[^}]*rank="1"[^}]*\} 0\.[0-9]*[1-9])"));
  }, 120)) << text << "\n" << job->output();
  // Every metric the catalog promises for such a run is there (GPU and resume ones excepted).
  std::set<std::string> seen;
  for (const auto& s : cadre::obs::exposition_parse(text)) seen.insert(s.name);
  for (const auto& d : cadre::obs::metric_catalog())
    if (d.when != cadre::obs::MetricWhen::OnGpu && d.when != cadre::obs::MetricWhen::AfterResume) {
      EXPECT_TRUE(seen.count(d.name)) << d.name << " missing from a live scrape";
    }
  // promtool's own checks of the exposition format and naming.
  cadre::test::write_text(path("scrape.txt"), text);
  auto lint = sh("promtool check metrics < " + path("scrape.txt"));
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  EXPECT_EQ(lint.output, "") << "promtool complained";

  // A real Prometheus scrapes the agent every second; the step comes back through its query API.
  const int prom_port = free_port();
  cadre::test::write_text(path("prometheus.yml"), "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                                  "  - job_name: cadre\n    honor_labels: true\n"
                                                  "    static_configs:\n      - targets: ['127.0.0.1:" +
                                                      std::to_string(port) + "']\n");
  Proc prometheus({"/usr/bin/prometheus", "--config.file=" + path("prometheus.yml"),
                   "--storage.tsdb.path=" + path("tsdb"), "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                  path("prometheus.log"));
  nlohmann::json answer;
  ASSERT_TRUE(wait_until([&] {
    std::string body = fetch(prom_port, "/api/v1/query?query=cadre_train_step%7Brank%3D%221%22%7D");
    answer = nlohmann::json::parse(body.empty() ? "{}" : body, nullptr, false);
    return answer.is_object() && answer.value("status", "") == "success" && !answer["data"]["result"].empty();
  }, 90)) << answer.dump() << "\n" << prometheus.output();
  const auto& result = answer["data"]["result"][0];
  EXPECT_EQ(result["metric"]["job"], "obs-test");  // Cadre's job label, kept by honor_labels
  EXPECT_EQ(result["metric"]["rank"], "1");
  EXPECT_GT(std::stod(result["value"][1].get<std::string>()), 0);
  // And a rate over the counters: the job's tokens per second.
  ASSERT_TRUE(wait_until([&] {
    std::string body = fetch(prom_port, "/api/v1/query?query=sum(rate(cadre_tokens_total%5B5s%5D))");
    answer = nlohmann::json::parse(body.empty() ? "{}" : body, nullptr, false);
    return answer.is_object() && !answer["data"]["result"].empty() &&
           std::stod(answer["data"]["result"][0]["value"][1].get<std::string>()) > 0;
  }, 30)) << answer.dump();
}

TEST_F(ObsLive, TopShowsEveryRankUnderTmuxAndQuitsOnQ) {
  const int port = free_port();
  auto job = start_job("top", 2, {"--metrics-port", std::to_string(port)}, {"train.steps=100000"});
  ASSERT_TRUE(wait_until([&] { return fetch(port).find("cadre_train_step{job=\"obs-test\",node=") != std::string::npos; },
                         120))
      << job->output();
  const std::string socket = "cadre-obs-test-" + std::to_string(::getpid());
  struct TmuxServer {
    std::string socket;
    ~TmuxServer() { sh("tmux -L " + socket + " kill-server 2>/dev/null"); }
  } tmux{socket};
  auto started = sh("tmux -L " + socket + " new-session -d -s top -x 150 -y 20 '" CADRE_BIN
                    " top --interval 0.3 http://127.0.0.1:" + std::to_string(port) + "/metrics'");
  ASSERT_EQ(started.exit_code, 0) << started.output;
  auto capture = [&] { return sh("tmux -L " + socket + " capture-pane -p -t top").output; };
  std::regex row0(R"(\n +0 \S+ +([0-9]+) +[0-9.]+ +[0-9]+% +[0-9]+% +[0-9]+% +[0-9]+ +[0-9.]+ )");
  std::regex row1(R"(\n +1 \S+ +[0-9]+ +[0-9.]+ +[0-9]+% )");
  std::string screen;
  std::smatch m;
  ASSERT_TRUE(wait_until([&] {
    screen = capture();
    return screen.find("RANK") != std::string::npos && screen.find("world 2") != std::string::npos &&
           std::regex_search(screen, m, row0) && std::regex_search(screen, row1);
  }, 30)) << screen;
  const long first_step = std::stol(m[1]);
  // It refreshes in place: the step moves on, and the screen holds one header, not a scroll of them.
  ASSERT_TRUE(wait_until([&] {
    screen = capture();
    std::smatch now;
    return std::regex_search(screen, now, row0) && std::stol(now[1]) > first_step;
  }, 30)) << screen;
  size_t headers = 0;
  for (size_t at = screen.find("cadre top"); at != std::string::npos; at = screen.find("cadre top", at + 1)) ++headers;
  EXPECT_EQ(headers, 1u) << screen;
  cadre::test::write_text(path("top-screen.txt"), screen);
  // q ends it (the session goes away with its only command).
  sh("tmux -L " + socket + " send-keys -t top q");
  EXPECT_TRUE(wait_until([&] { return sh("tmux -L " + socket + " has-session -t top").exit_code != 0; }, 10))
      << capture();
}

TEST_F(ObsLive, ReportRendersInHeadlessChromiumWithItsPlots) {
  // 30 steps, then a restart that resumes from step 30 and trains to 50: loss, events, a restart.
  for (int steps : {30, 50}) {
    auto job = start_job("rep", 2, {}, {"train.steps=" + std::to_string(steps), "checkpoint.interval=10",
                                        "train.eval_interval=10"});
    ASSERT_TRUE(job->wait_exit(180)) << job->output();
    ASSERT_EQ(job->exit_code(), 0) << job->output();
  }
  auto r = cadre::test::run_process({CADRE_BIN, "report", path("rep")}, {}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string html = read_file(path("rep/report.html"));
  size_t plots = 0, lines = 0;
  for (size_t at = html.find("<svg class=\"plot\""); at != std::string::npos; at = html.find("<svg class=\"plot\"", at + 1)) ++plots;
  for (size_t at = html.find("<polyline class=\"series\""); at != std::string::npos; at = html.find("<polyline class=\"series\"", at + 1)) ++lines;
  EXPECT_EQ(plots, 5u);
  EXPECT_GE(lines, 8u);  // loss, val, throughput, step wall + 2 ranks, split x3, memory
  EXPECT_NE(html.find("restart: resumed at step 30"), std::string::npos);
  EXPECT_NE(html.find("checkpoint saved"), std::string::npos);
  EXPECT_NE(html.find("parallel:"), std::string::npos);  // the config
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)=\"(https?:)?//)"))) << "the report must be self-contained";

  // Headless Chromium renders it; the screenshot is not blank and shows the plot lines' colors.
  struct ChromiumProfile {
    std::string dir;
    ~ChromiumProfile() {
      std::error_code ignored;
      cadre::remove_tree(dir, ignored);
    }
  } profile{path("chromium-profile")};
  auto shot = cadre::test::run_process(
      {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
       "--disable-background-networking", "--disable-component-update", "--disable-sync",
       "--user-data-dir=" + profile.dir, "--window-size=1000,2400", "--screenshot=" + path("report.png"),
       "file://" + path("rep/report.html")},
      {}, 120);
  ASSERT_TRUE(std::filesystem::exists(path("report.png"))) << shot.output;
  auto pixels = sh("/usr/bin/python3 - " + path("report.png") + R"( <<'EOF'
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
w, h = im.size
px = im.load()
total = w * h
nonwhite = sum(1 for y in range(0, h, 2) for x in range(0, w, 2) if px[x, y] != (255, 255, 255)) * 4
def near(c, ref):
    return all(abs(a - b) <= 40 for a, b in zip(c, ref))
blue = sum(1 for y in range(h) for x in range(w) if near(px[x, y], (0x1f, 0x77, 0xb4)))
red = sum(1 for y in range(h) for x in range(w) if near(px[x, y], (0xd6, 0x27, 0x28)))
print(f"size {w}x{h} nonwhite {nonwhite / total:.3f} blue {blue} red {red} colors {len(im.getcolors(1 << 24))}")
EOF)",
                   120);
  ASSERT_EQ(pixels.exit_code, 0) << pixels.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(pixels.output, m,
                                std::regex(R"(size 1000x2400 nonwhite ([0-9.]+) blue ([0-9]+) red ([0-9]+) colors ([0-9]+))")))
      << pixels.output;
  EXPECT_GT(std::stod(m[1]), 0.03) << "nearly blank: " << pixels.output;
  EXPECT_GT(std::stol(m[2]), 2000) << "too little of the series color: " << pixels.output;
  EXPECT_GT(std::stol(m[3]), 300) << pixels.output;
  EXPECT_GT(std::stol(m[4]), 100) << pixels.output;

  // Several runs on the same axes; a directory that is not a run is refused with exit code 2.
  auto compare = cadre::test::run_process({CADRE_BIN, "report", path("rep"), path("rep"), "--out", path("cmp.html")});
  ASSERT_EQ(compare.exit_code, 0) << compare.output;
  EXPECT_NE(read_file(path("cmp.html")).find("Cadre runs compared (2)"), std::string::npos);
  auto bad = cadre::test::run_process({CADRE_BIN, "report", path("nowhere")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("nowhere"), std::string::npos) << bad.output;
}

TEST_F(ObsLive, AJobResumedInTheSameLogDirectoryAfterAPauseIsNotTakenForAStall) {
  // The first run leaves its flight recorders in the log directory; the second resumes from its
  // checkpoint there once those records are older than the stall timeout. The agent must judge
  // only this round's activity: before the fix it read the old rings and reported a stall
  // within a second of starting (make demo run twice).
  const std::vector<std::string> sets = {"checkpoint.interval=4", "parallel.strategy=FULL_SHARD", "train.eval_interval=0"};
  auto with_steps = [&](int steps) {
    auto all = sets;
    all.push_back("train.steps=" + std::to_string(steps));
    return all;
  };
  auto first = start_job("again", 2, {"--stall-timeout", "2"}, with_steps(8));
  ASSERT_TRUE(first->wait_exit(180)) << first->output();
  ASSERT_EQ(first->exit_code(), 0) << first->output();
  const std::string ring = path("again-logs/round_0/rank_0/flight_recorder.bin");
  const int64_t last = cadre::obs::flight_recorder_read_file(ring, 8).last_activity_ns;
  ASSERT_GT(last, 0) << "the first run left no flight recorder at " << ring;
  // The pause: until the old ring's newest activity is 3 s old, past the 2 s timeout.
  ASSERT_TRUE(wait_until([&] { return cadre::obs::wall_clock_ns() - last > 3'000'000'000; }, 10));

  auto second = start_job("again", 2, {"--stall-timeout", "2"}, with_steps(16));
  ASSERT_TRUE(second->wait_exit(180)) << second->output();
  ASSERT_EQ(second->exit_code(), 0) << second->output();
  EXPECT_NE(second->output().find("resum"), std::string::npos) << second->output();
  EXPECT_EQ(second->output().find("stall:"), std::string::npos) << second->output();
  // Nor any dump: neither run had a stall to dump for, and the second restarted nothing.
  EXPECT_FALSE(std::filesystem::exists(path("again/flight_recorder"))) << second->output();
  EXPECT_FALSE(std::filesystem::exists(path("again-logs/round_1"))) << second->output();
}

TEST_F(ObsLive, HangOfAStoppedRankIsNamedWithTheOpAndSequenceNumber) {
  // --stall-action dump: the group is kept, stopped rank and all, for the dumps to be read.
  auto job = start_job("hang", 3, {"--stall-timeout", "2", "--stall-action", "dump"},
                       {"train.steps=100000", "parallel.strategy=FULL_SHARD", "parallel.comm_timeout=120"});
  ASSERT_TRUE(wait_until([&] { return jsonl(path("hang/metrics.jsonl")).size() >= 5; }, 120)) << job->output();
  pid_t victim = worker_pid(path("hang-logs"), 1);
  ASSERT_GT(victim, 0);
  ContinueOnExit continue_it{victim};
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  nlohmann::json error;
  ASSERT_TRUE(wait_until([&] {
    error = nlohmann::json::parse(read_file(path("hang-logs/error.json")), nullptr, false);
    return error.is_object() && error.contains("hang");
  }, 60)) << job->output();
  const auto& hang = error["hang"];
  const std::string message = error["message"];
  // Rank 1 is named: as the rank the others wait for, or (stopped mid-op) as stopped inside it.
  auto has = [](const nlohmann::json& list, int r) {
    for (const auto& x : list)
      if (x == r) return true;
    return false;
  };
  EXPECT_TRUE(has(hang["missing_ranks"], 1) || has(hang["stopped_ranks"], 1)) << hang.dump(1);
  EXPECT_FALSE(has(hang["missing_ranks"], 0) || has(hang["missing_ranks"], 2)) << hang.dump(1);
  EXPECT_TRUE(has(hang["waiting_ranks"], 0) && has(hang["waiting_ranks"], 2)) << hang.dump(1);
  const int64_t seq = hang["seq"];
  EXPECT_GT(seq, 0);
  EXPECT_TRUE(std::regex_search(message, std::regex(R"(rank 1( did not enter it|'s process is stopped))"))) << message;
  EXPECT_NE(message.find("#" + std::to_string(seq) + " on "), std::string::npos) << message;
  EXPECT_NE(message.find("sequence number " + std::to_string(seq)), std::string::npos) << message;
  EXPECT_TRUE(std::regex_search(hang["op"].get<std::string>(), std::regex("^(all_reduce|all_gather|reduce_scatter|broadcast|barrier)")))
      << hang.dump(1);
  // Every rank's flight recorder is in the run directory: ranks 0 and 2 dumped themselves
  // (SIGUSR1), the stopped rank's ring was written by the agent. Rank 1's newest op is the
  // stalled one (stopped inside it) or the one before (stopped between them); the others have
  // entered the stalled op.
  auto newest = [&](int r) {
    int64_t last = -1;
    auto dump = nlohmann::json::parse(read_file(path("hang/flight_recorder/rank_" + std::to_string(r) + ".json")),
                                      nullptr, false);
    if (dump.is_object())
      for (const auto& e : dump["entries"])
        if (e["group"] == hang["group"]) last = std::max(last, e["seq"].get<int64_t>());
    return last;
  };
  ASSERT_TRUE(wait_until([&] { return newest(0) >= seq && newest(2) >= seq; }, 10)) << newest(0) << " " << newest(2);
  const int64_t stopped_at = newest(1);
  EXPECT_TRUE(stopped_at == seq || stopped_at == seq - 1) << stopped_at << " vs " << seq;
  EXPECT_EQ(has(hang["missing_ranks"], 1), stopped_at == seq - 1) << hang.dump(1);
  auto dump1 = nlohmann::json::parse(read_file(path("hang/flight_recorder/rank_1.json")), nullptr, false);
  EXPECT_NE(dump1.value("written_by", "").find("agent"), std::string::npos);
  EXPECT_NE(job->output().find("hang: collective stalled"), std::string::npos);

  // The same dumps in PyTorch's format (pytorch_trace_rank_<R>), read by PyTorch's analyzer.
  // Its first collective it cannot match on every rank is the stalled op. Where Cadre names
  // ranks that did not enter it, the analyzer names the same missing ranks there; where every
  // rank entered it, the analyzer names none there, and the ranks it sees still in it
  // ("started") are those Cadre says are inside it (all, or those still inside while others
  // finished it). Later ops may show ranks missing: they follow from the stall.
  const std::string fr_dir = path("hang/flight_recorder");
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(fr_dir + "/pytorch_trace_rank_" + std::to_string(r)); },
                           10)) << "no PyTorch-format dump of rank " << r;
  auto analyzer = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/fr_trace_check.py", fr_dir},
                                           {}, 300);
  ASSERT_EQ(analyzer.exit_code, 0) << analyzer.output;
  const auto torch = nlohmann::json::parse(analyzer.output.substr(analyzer.output.find('{')), nullptr, false);
  ASSERT_TRUE(torch.is_object() && torch["exit_code"] == 0) << analyzer.output;
  const nlohmann::json* first = nullptr;
  for (const auto& c : torch["unmatched"])
    if (!first || c["seq"].get<int64_t>() < (*first)["seq"].get<int64_t>()) first = &c;
  std::vector<int> inside;  // Cadre: the ranks inside the stalled op
  std::smatch m;
  const std::regex inside_text(R"(ranks? ([0-9, ]+) (waited|are still inside it))"), number(R"(\d+)");
  if (std::regex_search(message, m, inside_text)) {
    const std::string ranks = m[1].str();
    for (std::sregex_iterator it(ranks.begin(), ranks.end(), number), end; it != end; ++it)
      inside.push_back(std::stoi(it->str()));
  } else if (message.find("every rank with a record entered it") != std::string::npos) {
    inside = {0, 1, 2};
  }
  ASSERT_FALSE(inside.empty()) << message;
  std::vector<int> started;  // the analyzer: the ranks whose state of the stalled op is "started"
  if (first) {
    for (const auto& [r, state] : (*first)["states"].items())
      if (state == "started") started.push_back(std::stoi(r));
  }
  std::sort(started.begin(), started.end());
  if (first && (*first)["seq"] == seq) {
    EXPECT_EQ((*first)["missing_ranks"], hang["missing_ranks"]) << torch.dump(1);
    if (hang["missing_ranks"].empty()) {
      EXPECT_EQ(started, inside) << torch.dump(1) << "\n" << message;
    }
  } else if (!first || (*first)["seq"].get<int64_t>() > seq) {
    // The analyzer matched the stalled op on every rank: that is so only when all entered it and
    // none finished it.
    EXPECT_TRUE(hang["missing_ranks"].empty()) << "the analyzer matched an op Cadre says a rank did not enter: "
                                               << torch.dump(1);
    EXPECT_EQ(inside, std::vector<int>({0, 1, 2})) << message;
  } else {
    ADD_FAILURE() << "the analyzer's first unmatched op is #" << (*first)["seq"] << ", before Cadre's stalled op #"
                  << seq << ": " << torch.dump(1);
  }
  const nlohmann::json* named = first;
  std::printf("[hang] Cadre: %s\n[hang] torch %s fr_trace: %d collectives matched; %s\n", message.c_str(),
              torch["torch"].get<std::string>().c_str(), torch["matched"].get<int>(),
              named ? ("first unmatched: #" + (*named)["seq"].dump() + " " + (*named)["name"].get<std::string>() +
                       ", missing " + (*named)["missing_ranks"].dump() + ", states " + (*named)["states"].dump()).c_str()
                    : "every collective matched");
}

namespace {

// Per-step losses of a run directory's metrics.jsonl records (a step logged again after a
// resume: the newest record).
std::map<int64_t, double> losses_by_step(const std::vector<nlohmann::json>& records) {
  std::map<int64_t, double> out;
  for (const auto& r : records)
    if (r.contains("step") && r.contains("loss") && r["loss"].is_number()) out[r["step"].get<int64_t>()] = r["loss"];
  return out;
}

}  // namespace

TEST_F(ObsLive, AStoppedRankIsRestartedFromTheLastCheckpointWithAnUninterruptedRunsLosses) {
  // A hang recovers as a crash does: the agent finds the stall (2 s without collective
  // activity), dumps, then restarts the group from the newest checkpoint within --max-restarts.
  // The same world size resumes bit for bit: every step's loss equals the uninterrupted run's.
  const int steps = 300;
  const std::vector<std::string> sets = {"train.steps=" + std::to_string(steps), "checkpoint.interval=20",
                                         "parallel.strategy=FULL_SHARD", "train.eval_interval=0",
                                         "parallel.comm_timeout=120"};
  auto straight = start_job("straight", 2, {"--stall-timeout", "2"}, sets);
  ASSERT_TRUE(straight->wait_exit(300)) << straight->output();
  ASSERT_EQ(straight->exit_code(), 0) << straight->output();
  const auto reference = losses_by_step(jsonl(path("straight/metrics.jsonl")));
  ASSERT_EQ(reference.size(), size_t(steps));

  auto job = start_job("stopped", 2, {"--stall-timeout", "2", "--max-restarts", "1"}, sets, {"--resume", "auto"});
  ASSERT_TRUE(wait_until([&] { return jsonl(path("stopped/metrics.jsonl")).size() >= 30; }, 120)) << job->output();
  pid_t victim = worker_pid(path("stopped-logs"), 1);
  ASSERT_GT(victim, 0);
  ContinueOnExit continue_it{victim};
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const int64_t stopped_at = losses_by_step(jsonl(path("stopped/metrics.jsonl"))).rbegin()->first;
  ASSERT_LT(stopped_at, steps) << "the run finished before rank 1 was stopped";

  ASSERT_TRUE(job->wait_exit(300)) << job->output();
  const std::string out = job->output();
  ASSERT_EQ(job->exit_code(), 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(stall: rank [01] (had no collective activity|has been inside))"))) << out;
  EXPECT_NE(out.find("restarting the group (--stall-action restart)"), std::string::npos) << out;
  // Named as today: the stopped rank's ring written by the agent.
  auto dump1 = nlohmann::json::parse(read_file(path("stopped/flight_recorder/rank_1.json")), nullptr, false);
  ASSERT_TRUE(dump1.is_object());
  EXPECT_NE(dump1.value("written_by", "").find("agent"), std::string::npos) << dump1.value("written_by", "");
  // Round 1 resumed from a checkpoint at or before the stop, and went on to the last step.
  const std::string resumed_log = read_file(path("stopped-logs/round_1/rank_0/stderr.log"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed_log, m, std::regex(R"(resumed from \S+ at step (\d+))"))) << resumed_log;
  const int64_t resumed_at = std::stoll(m[1].str());
  EXPECT_GT(resumed_at, 0);
  EXPECT_LE(resumed_at, stopped_at + 1);
  EXPECT_FALSE(std::filesystem::exists(path("stopped-logs/round_2"))) << "restarted more than once";
  const auto losses = losses_by_step(jsonl(path("stopped/metrics.jsonl")));
  ASSERT_EQ(losses.size(), size_t(steps));
  EXPECT_EQ(losses.rbegin()->first, steps);
  int64_t compared_after_resume = 0;
  for (const auto& [step, loss] : reference) {
    ASSERT_TRUE(losses.count(step)) << "step " << step;
    EXPECT_EQ(losses.at(step), loss) << "step " << step << " (resumed at " << resumed_at << ")";
    if (step > resumed_at) ++compared_after_resume;
  }
  EXPECT_EQ(compared_after_resume, steps - resumed_at);
  std::printf("[stall-restart] rank 1 stopped at step %lld; group restarted, resumed at step %lld, %d steps equal to "
              "the uninterrupted run's\n", (long long)stopped_at, (long long)resumed_at, steps);
}

TEST_F(ObsLive, ASlowedRankIsNamedAsAComputeBoundStraggler) {
  auto job = start_job("slow", 2, {}, {"train.steps=100000", "data.batch_size=16", "obs.straggler_steps=5"});
  ASSERT_TRUE(wait_until([&] { return jsonl(path("slow/metrics.jsonl")).size() >= 3; }, 120)) << job->output();
  pid_t victim = worker_pid(path("slow-logs"), 1);
  ASSERT_GT(victim, 0);
  // A noisy neighbour: rank 1 runs 15 ms of every 75 ms.
  std::atomic<bool> stop{false};
  std::thread cycle([&] {
    while (!stop) {
      ::kill(victim, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      ::kill(victim, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    ::kill(victim, SIGCONT);
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, cycle};
  nlohmann::json event;
  ASSERT_TRUE(wait_until([&] {
    for (const auto& e : jsonl(path("slow/events.jsonl")))
      if (e.value("event", "") == "straggler" && e["rank"] == 1) {
        event = e;
        return true;
      }
    return false;
  }, 120)) << job->output();
  EXPECT_EQ(event["rank"], 1) << event.dump();
  EXPECT_EQ(event["cause"], "compute-bound") << event.dump();
  EXPECT_GT(event["ratio"].get<double>(), 1.5);
  // The log line (through the agent's log forwarder) and the step's metrics record follow.
  EXPECT_TRUE(wait_until([&] {
    return std::regex_search(job->output(),
                             std::regex(R"(straggler: rank 1 is [0-9.]+x slower than the other ranks' median.*compute-bound)"));
  }, 30)) << job->output();
  // metrics.jsonl carries every rank's times, and its newest records name rank 1 alone. (On a
  // machine loaded by other work, rank 0 may have been named for a few steps before the slowing
  // began: scheduling noise is real slowness too.)
  nlohmann::json last;
  EXPECT_TRUE(wait_until([&] {
    for (const auto& m : jsonl(path("slow/metrics.jsonl"))) {
      if (!m.contains("rank_busy_s") || m["rank_busy_s"].size() != 2u) return false;
      last = m;
    }
    return last.contains("stragglers") && last["stragglers"] == nlohmann::json::array({1});
  }, 30)) << last.dump();
}
