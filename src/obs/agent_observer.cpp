// The agent's observability (see agent_observer.h).
#include "obs/agent_observer.h"

#include <signal.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "obs/flight_recorder.h"
#include "obs/flight_recorder_torch.h"
#include "obs/metrics_server.h"
#include "obs/proc_stat.h"
#include "obs/worker_channel.h"

namespace cadre::obs {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return stamp;
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// How long diagnoses are refreshed after a stall, as dumps of other nodes' ranks arrive.
constexpr double kDiagnosisWindowS = 10;
// With --stall-action restart, how long the group is kept after a stall is found: the workers
// asked for dumps (SIGUSR1) write them, and two diagnoses (one a second) see them. Short beside
// any stall timeout worth having; the dumps of a worker that does not answer are the agent's own
// (when no worker was asked, the restart does not wait).
constexpr double kRestartAfterDumpS = 2;

}  // namespace

AgentObserver::AgentObserver(AgentObserverOptions options)
    : options_(std::move(options)),
      metrics_(std::make_unique<JobMetrics>(options_.job, options_.node)),
      channel_(std::make_unique<ChannelReceiver>()) {
  // The server first: a port already taken throws (ConfigError naming --metrics-port) before any
  // thread of this object runs, so the constructor's failure leaves nothing joinable behind.
  if (options_.metrics_port >= 0) {
    server_ = std::make_unique<MetricsServer>(options_.metrics_addr, options_.metrics_port,
                                              [this] { return metrics_->exposition(); });
    log::info("metrics: serving " + server_->url());
    if (!options_.log_dir.empty()) file_write_atomic(options_.log_dir + "/metrics.url", server_->url() + "\n");
  }
  receiver_ = std::thread([this] {
    bool warned = false;
    while (!stopping_) {
      for (const std::string& message : channel_->receive(std::chrono::milliseconds(200))) {
        try {
          metrics_->report(WorkerReport::from_json(message));
        } catch (const Error& e) {
          if (!warned) log::warn(str("metrics: ignoring a message on the worker channel: ", e.what()));
          warned = true;
        }
      }
    }
  });
}

AgentObserver::~AgentObserver() {
  if (server_ && !options_.log_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove(options_.log_dir + "/metrics.url", ignored);  // nobody answers there any more
  }
  server_.reset();
  stopping_ = true;
  if (receiver_.joinable()) receiver_.join();
}

int AgentObserver::metrics_port() const { return server_ ? server_->port() : -1; }

std::vector<std::pair<std::string, std::string>> AgentObserver::worker_env(const std::string& rank_dir) const {
  return {{"CADRE_METRICS_SOCKET", channel_->name()}, {"CADRE_FLIGHT_RECORDER_FILE", recorder_file(rank_dir)}};
}

void AgentObserver::round_started(const RoundFacts& round, const std::vector<LocalWorker>& workers) {
  round_ = round;
  workers_ = workers;
  round_started_ns_ = wall_clock_ns();
  stalled_ = false;
  stall_reason_.clear();
  stalled_rank_ = -1;
  stalled_outside_collectives_ = false;
  dumps_asked_ = 0;
  hang_.reset();
  metrics_->round_started(round, workers);
}

void AgentObserver::round_ended() {
  metrics_->round_ended();
  workers_.clear();
}

std::string AgentObserver::run_dir() const {
  for (const auto& view : metrics_->workers())
    if (view.last && !view.last->run_dir.empty()) return view.last->run_dir;
  return "";
}

void AgentObserver::poll() {
  if (options_.stall_timeout_s <= 0 || workers_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  // A tenth of the timeout (at most a second): a stall is found within 10% of it, reading the
  // workers' small rings ten times per timeout.
  if (seconds_between(last_poll_, now) < std::min(1.0, options_.stall_timeout_s / 10)) return;
  last_poll_ = now;
  if (stalled_) {
    if (seconds_between(stalled_at_, now) <= kDiagnosisWindowS) {
      if (seconds_between(last_diagnosis_, now) >= 1) diagnose();
      return;
    }
  }
  // A worker with no collective activity (issue, start or end of any of its collectives) for
  // longer than the timeout, after it had some. Waiting inside one op long is not enough by
  // itself: a background thread's op may wait legitimately (a checkpoint's agreement while a
  // peer still writes) while the training thread goes on issuing others.
  const int64_t now_ns = wall_clock_ns();
  const int64_t limit_ns = int64_t(options_.stall_timeout_s * 1e9);
  std::string why;
  int rank = -1;
  bool inside = false;
  for (const auto& w : workers_) {
    if (w.recorder_file.empty()) continue;
    FlightRecorderState fr;
    try {
      fr = flight_recorder_read_file(w.recorder_file, 64);  // in-flight ops are among the newest
    } catch (const Error&) {
      continue;  // not written yet
    }
    // Activity from before this round is not this worker's: a job resumed in the same log
    // directory finds the previous run's ring there until the new worker rewrites it.
    if (fr.last_activity_ns < round_started_ns_ || now_ns - fr.last_activity_ns <= limit_ns ||
        !proc_stat_read(w.pid).exists)
      continue;
    const double quiet_s = double(now_ns - fr.last_activity_ns) * 1e-9;
    rank = w.rank;
    why = str("rank ", w.rank, " had no collective activity for ", quiet_s, " s");
    for (const auto& r : fr.records)
      if (r.state == CollectiveState::Started) {
        why = str("rank ", w.rank, " has been inside ", r.describe(), " for ", double(now_ns - r.started_ns) * 1e-9,
                  " s");
        inside = true;
        break;
      }
    break;
  }
  if (why.empty()) {
    stalled_ = false;  // a past stall resolved itself
    return;
  }
  if (!stalled_) on_stall(rank, why, !inside);
}

bool AgentObserver::restart_due() const {
  // No worker of this node was asked for a dump (each one is stopped or gone, and the agent wrote
  // its ring itself): nothing to wait for here.
  return options_.stall_restarts && !stall_reason_.empty() &&
         (dumps_asked_ == 0 || seconds_between(stalled_at_, std::chrono::steady_clock::now()) >= kRestartAfterDumpS);
}

std::string AgentObserver::stall_reason() const { return hang_ ? hang_->message : stall_reason_; }

int AgentObserver::stalled_rank() const {
  if (hang_ && !hang_->stopped.empty()) return hang_->stopped.front();
  if (hang_ && !hang_->missing.empty()) return hang_->missing.front();
  return stalled_rank_;
}

bool AgentObserver::stall_cause_is_local() const {
  auto is_local = [&](int rank) {
    for (const auto& w : workers_)
      if (w.rank == rank) return true;
    return false;
  };
  if (hang_ && !(hang_->stopped.empty() && hang_->missing.empty())) return is_local(stalled_rank());
  // Quiet outside any collective (stuck in compute, in I/O): nobody waits for this rank's peers.
  if (stalled_outside_collectives_ && is_local(stalled_rank_)) return true;
  for (const auto& w : workers_)
    if (proc_is_stopped(proc_stat_read(w.pid))) return true;
  return false;
}

void AgentObserver::on_stall(int rank, const std::string& why, bool outside_collectives) {
  stalled_ = true;
  stalled_at_ = std::chrono::steady_clock::now();
  if (stall_reason_.empty()) {
    stall_reason_ = why;
    stalled_rank_ = rank;
    stalled_outside_collectives_ = outside_collectives;
  }
  log::warn(str("stall: ", why, " (--stall-timeout ", options_.stall_timeout_s,
                " s); asking this node's workers for flight-recorder dumps"));
  const std::string dir = run_dir();
  dumps_asked_ = 0;
  for (const auto& view : metrics_->workers()) {
    const LocalWorker& w = view.worker;
    ProcStat p = proc_stat_read(w.pid);
    const bool can_answer =
        view.last && view.last->dumps_on_sigusr1 && p.exists && !proc_is_stopped(p) && p.state != 'Z';
    if (can_answer) {
      ::kill(w.pid, SIGUSR1);
      ++dumps_asked_;
      continue;
    }
    // A stopped or stuck worker cannot dump itself: its ring is in the shared file.
    if (w.recorder_file.empty()) continue;
    try {
      FlightRecorderState fr = flight_recorder_read_file(w.recorder_file);
      std::string target_dir = dir.empty() ? std::filesystem::path(w.recorder_file).parent_path().string()
                                           : dir + "/flight_recorder";
      std::filesystem::create_directories(target_dir);
      std::string path = str(target_dir, "/rank_", w.rank, ".json");
      file_write_atomic(path, flight_recorder_dump_json(fr, "stall detected by the agent: " + why,
                                                        str("agent (the worker is ", proc_state_name(p.state), ")")));
      if (fr.rank < 0) fr.rank = w.rank;
      file_write_atomic(flight_recorder_torch_dump_path(target_dir, w.rank), flight_recorder_torch_dump(fr));
      log::info(str("flight recorder: rank ", w.rank, " is ", proc_state_name(p.state), "; wrote its ring to ", path));
    } catch (const std::exception& e) {
      log::warn(str("flight recorder: rank ", w.rank, ": ", e.what()));
    }
  }
  diagnose();
}

void AgentObserver::diagnose() {
  last_diagnosis_ = std::chrono::steady_clock::now();
  const int64_t now_ns = wall_clock_ns();
  const std::string dir = run_dir();
  std::vector<RankEvidence> evidence;
  std::vector<bool> local(size_t(std::max<int64_t>(round_.world_size, 0)), false);
  for (const auto& w : workers_) {
    RankEvidence e;
    e.rank = w.rank;
    ProcStat p = proc_stat_read(w.pid);
    e.process_state = p.exists ? p.state : 0;
    try {
      e.recorder = flight_recorder_read_file(w.recorder_file);
      e.has_recorder = true;
      e.source = "shared ring " + w.recorder_file;
    } catch (const Error&) {
    }
    if (w.rank >= 0 && size_t(w.rank) < local.size()) local[w.rank] = true;
    evidence.push_back(std::move(e));
  }
  // Ranks of other nodes: their dumps, when the run directory is shared and they are recent.
  for (int r = 0; r < int(local.size()); ++r) {
    if (local[r]) continue;
    RankEvidence e;
    e.rank = r;
    std::string path = str(dir, "/flight_recorder/rank_", r, ".json");
    if (!dir.empty() && std::filesystem::exists(path)) {
      try {
        std::string text = read_text(path);
        const int64_t written = flight_recorder_dump_time_ns(text);
        if (now_ns - written < int64_t((kDiagnosisWindowS + options_.stall_timeout_s) * 1e9)) {
          e.recorder = flight_recorder_parse_dump(text, path);
          e.has_recorder = true;
          e.source = "dump " + path;
        }
      } catch (const Error& err) {
        log::warn(err.what());
      }
    }
    evidence.push_back(std::move(e));
  }
  HangDiagnosis d = hang_diagnose(evidence, int(round_.world_size), now_ns);
  if (!d.found || d.waited_s < options_.stall_timeout_s) return;
  // The names and numbers decide whether this is news; the waited times move on every call.
  if (hang_ && hang_->group == d.group && hang_->seq == d.seq && hang_->missing == d.missing &&
      hang_->waiting == d.waiting && hang_->no_data == d.no_data && hang_->stopped == d.stopped)
    return;
  const bool first = !hang_;
  hang_ = d;
  metrics_->set_hang_detected(true);
  log::warn("hang: " + d.message + (dir.empty() ? "" : str("; dumps in ", dir, "/flight_recorder/")));
  nlohmann::json j = {{"message", "hang: " + d.message},
                      {"time", utc_now()},
                      {"round", round_.number},
                      {"hang", d.to_json()},
                      {"dumps", dir.empty() ? "" : dir + "/flight_recorder"}};
  if (!options_.error_file.empty()) {
    try {
      file_write_atomic(options_.error_file, j.dump(2) + "\n");
      if (first) log::warn("error file: " + options_.error_file);
    } catch (const std::exception& e) {
      log::warn(str("writing the hang diagnosis to ", options_.error_file, ": ", e.what()));
    }
  }
}

void AgentObserver::job_succeeded() {
  if (!hang_ || options_.error_file.empty()) return;
  // The job got over it: the diagnosis stays, but not under the name that means "failed".
  std::error_code ignored;
  const std::string kept = std::filesystem::path(options_.error_file).parent_path().string() + "/hang.json";
  std::filesystem::rename(options_.error_file, kept, ignored);
  log::info("the stall resolved itself; its diagnosis is kept in " + kept);
}

void AgentObserver::annotate_error_file() {
  if (!hang_ || options_.error_file.empty()) return;
  try {
    auto j = nlohmann::json::parse(read_text(options_.error_file), nullptr, false);
    if (!j.is_object()) return;
    j["hang"] = hang_->to_json();
    file_write_atomic(options_.error_file, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    log::warn(str("adding the hang diagnosis to ", options_.error_file, ": ", e.what()));
  }
}

}  // namespace cadre::obs
