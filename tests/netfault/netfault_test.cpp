// Multi-node fault tolerance across real network hops (issue #7). Three hosts are network
// namespaces on a bridge (virtual_hosts.h), each running one `cadre run` agent that trains the tiny
// Llama with FULL_SHARD (--nnodes 2:3, one worker per host; host 0 holds the rendezvous store).
//   KilledHostLeavesAndTheOthersFinish: SIGKILL everything on host 2 (agent and worker): the two
//     others re-form a 2-node group and train to the end.
//   CutHostIsDetectedThenRejoinsWhenBack: host 2's switch port goes down (packets vanish, nobody is
//     told): the others detect it within heartbeat_timeout and re-form with 2; the cut host's agent
//     gives up on the unreachable store within store_timeout; the link comes back, its agent is
//     restarted (as a cluster manager would) and it rejoins at the next round (scale-up to 3).
//   CutHostCaughtByCommTimeoutWhenHeartbeatsAreSlow: same cut with heartbeat_timeout above the
//     workers' parallel.comm_timeout: a survivor's collective times out, which ends the round as a
//     failure (counted by --max-restarts); same outcome.
//   ShortPartitionHealsAndTheHostRejoinsByItself: the link comes back while the cut host's agent
//     still waits on the store (store_timeout longer than the outage): its pending request goes
//     through on TCP's next retransmission, it sees the round ended without it, stops its worker
//     and rejoins at the next round without being restarted.
// Training checkpoints every kCheckpointInterval steps and runs with `--resume auto`, so a
// re-formed group continues from the newest complete checkpoint (steps lost = fault step - that
// step, at most the interval); a scale-up stops workers gracefully and loses no step.
// Every stretch of training (metrics.jsonl segment) must match a fault-free run: "same loss at the
// same step" means, here, the same trajectory as a fault-free run *at the same world size from
// the same checkpoint*. A different world size changes the global batch (batch_size per rank
// times ranks), so the steps after 3 -> 2 hosts are compared with a fault-free 2-rank run resumed
// from the checkpoint the re-formed group loaded, not with the 3-rank run. The first stretch is
// compared with a fault-free 3-rank run from scratch (cached per build). Each test prints
// recovery time (fault to first step of the re-formed group, seen by polling metrics.jsonl every
// 20 ms) and steps lost.
//   KilledHostZeroSurvivesWithEtcd: with `--rdzv-backend etcd` (one etcd member on the switch, on
//     no host) the store no longer lives in host 0's agent, so host 0 itself can die: hosts 1 and
//     2 re-form (rank 0 moves to host 1) and finish.
// The *FromMemory* tests run `--recovery memory` (issue #26): the survivors keep their processes
// and state, e.g. CutHostSurvivorsGoOnFromMemoryBeforeTheCollectiveTimeout: the agents tell their
// workers of the silent host, whose collectives abort instead of waiting out comm_timeout.
// Needs root (CI has it); without root the tests fail and say so.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <set>

#include "launch/launch_harness.h"
#include "netfault/metrics_watch.h"
#include "netfault/training_run.h"
#include "netfault/virtual_hosts.h"
#include "support/comm_timeout.h"
#include "support/etcd_cluster.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

using cadre::netfault::Clock;
using cadre::netfault::MetricsWatch;
using cadre::netfault::Segment;
using cadre::netfault::TrainShape;
using cadre::netfault::Losses;
using cadre::netfault::losses_of;
using cadre::netfault::steps_logged;
using cadre::netfault::VirtualHosts;
using launch_test::Proc;
using launch_test::read_file;

namespace {

constexpr int kSteps = 30;              // per training run
const int kCheckpointInterval = TrainShape{}.checkpoint_interval;
constexpr int kFaultAfterStep = 8;      // faults are injected once this step is done
constexpr double kLossTolerance = 1e-6;  // same world size, same start: the same arithmetic
const char* kStorePort = "29400";

// How fast faults are noticed, in seconds: the agents' heartbeat deadline, the workers' collective
// deadline (parallel.comm_timeout; normally above the heartbeat so a lost node is a membership
// change), and how long an agent waits on the rendezvous store before giving up.
struct Timeouts {
  int last_call_s = 2;
  int heartbeat_s = 3;
  int comm_s = 20;
  int store_s = 5;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The trainer's command line (without the launcher), writing to run_dir.
std::vector<std::string> train_args(const std::string& data_dir, const std::string& run_dir, int steps,
                                    int comm_timeout_s, const TrainShape& shape = {}) {
  return cadre::netfault::train_args(CADRE_BIN, CADRE_SOURCE_DIR, data_dir, run_dir, steps, comm_timeout_s, shape);
}

// Newest step with a complete (COMMITTED) checkpoint under <run_dir>/checkpoints, 0 if none.
int64_t newest_committed_step(const std::string& run_dir) {
  int64_t newest = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && std::filesystem::exists(e.path() / "COMMITTED"))
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
  }
  return newest;
}

// What the test saw around one fault, for the report.
struct FaultReport {
  std::string scenario;
  int64_t fault_step = 0;        // last step completed before the fault
  int64_t committed = 0;         // newest complete checkpoint when the fault hit
  int64_t resumed_step = 0;      // first step the re-formed group completed
  double detect_s = -1;          // fault -> a surviving agent ends the round
  double resume_s = -1;          // fault -> first step of the re-formed group
  std::string detected_by;       // the agent's log line
  std::string print() const {
    // The detection line is clipped: a collective's error names its whole op and cause.
    const std::string by = detected_by.size() > 200 ? detected_by.substr(0, 200) + "..." : detected_by;
    char line[512];
    std::snprintf(line, sizeof line,
                  "[netfault] %s: fault after step %lld; detected after %.2f s (%s); training resumed after %.2f s "
                  "with step %lld; steps lost %lld",
                  scenario.c_str(), static_cast<long long>(fault_step), detect_s, by.c_str(), resume_s,
                  static_cast<long long>(resumed_step), static_cast<long long>(fault_step - (resumed_step - 1)));
    return line;
  }
};

class NetFault : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new cadre::test::TempDir("netfault-shared");
    data_dir_ = cadre::test::prepare_tiny_dataset(shared_->path(), 8, 30000);
  }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }

  // Loss per step of a fault-free run at this world size, on loopback with one agent and `world`
  // workers: the same ranks, batches and collectives as `world` hosts. Computed once per build:
  // kept next to the test binary, keyed by the binaries' and the config's identity, so the
  // tests (separate processes under ctest) share it.
  static const Losses& reference(int world, int steps, const TrainShape& shape = {}) {
    static std::map<std::string, Losses> cache;
    const std::string name = "reference-" + std::to_string(world) + "-" + std::to_string(steps) + "-" + shape.name();
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
    const std::string& id = name;
    auto train = train_args(data_dir_, *shared_ / name, steps, Timeouts{}.comm_s, shape);
    std::string stored = reference_file(world, steps, shape);
    if (std::filesystem::exists(stored)) return cache[id] = nlohmann::json::parse(read_file(stored)).get<Losses>();
    std::vector<std::string> argv = {CADRE_BIN, "run", "--nproc-per-node", std::to_string(world), "--log-dir",
                                     *shared_ / (name + "-logs"), "--"};
    argv.insert(argv.end(), train.begin(), train.end());
    auto t0 = Clock::now();
    auto r = cadre::test::run_process(argv, {"OMP_NUM_THREADS=1"}, 300);
    if (r.exit_code != 0)
      throw std::runtime_error("reference run at world size " + std::to_string(world) + " failed:\n" + r.output);
    std::printf("[netfault] fault-free reference run, world size %d: %.1f s\n", world, seconds(Clock::now() - t0));
    Losses losses = losses_of(*shared_ / (name + "/metrics.jsonl"));
    if (losses.size() != static_cast<size_t>(steps))
      throw std::runtime_error("reference run " + name + " logged " + std::to_string(losses.size()) + " steps, not " +
                               std::to_string(steps));
    std::string tmp = stored + ".tmp." + std::to_string(::getpid());
    cadre::test::write_text(tmp, nlohmann::json(losses).dump());  // [[step, loss], ...]
    std::filesystem::rename(tmp, stored);  // atomic: a parallel test may race us
    return cache[id] = losses;
  }
  static std::string reference_file(int world, int steps, const TrainShape& shape) {
    auto identity = [](const std::string& path) {
      std::error_code ec;
      auto stamp = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
      return path + ":" + std::to_string(stamp) + ":" + std::to_string(std::filesystem::file_size(path, ec));
    };
    std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string key = identity(CADRE_BIN) + identity(exe) + read_file(CADRE_SOURCE_DIR "/configs/tiny.yaml");
    return std::filesystem::path(exe).parent_path().string() + "/netfault-reference-" + std::to_string(world) + "x" +
           std::to_string(steps) + "-" + shape.name() + "-" + std::to_string(std::hash<std::string>{}(key)) + ".json";
  }

  // Runs `cadre run` of a fault-free reference on `world` local workers into dir_/<name> (the
  // schedule that of steps_), stopping after step `stop_at` when it is before the end; its output.
  std::string run_reference(int world, const std::string& name, const TrainShape& shape, int64_t stop_at) {
    std::vector<std::string> argv = {CADRE_BIN, "run", "--nproc-per-node", std::to_string(world), "--log-dir",
                                     dir_ / (name + "-logs"), "--"};
    auto train = train_args(data_dir_, dir_ / name, steps_, Timeouts{}.comm_s, shape);
    argv.insert(argv.end(), train.begin(), train.end());
    if (stop_at < steps_) argv.insert(argv.end(), {"--set", "train.stop_at=" + std::to_string(stop_at)});
    auto r = cadre::test::run_process(argv, {"OMP_NUM_THREADS=1"}, 300);
    if (r.exit_code != 0) throw std::runtime_error("reference run " + name + " failed:\n" + r.output);
    return r.output;
  }

  // Loss per step of a fault-free run at this world size up to step `last` (train.stop_at): where
  // only the steps before a membership change are compared, the rest of a 300-step run is time
  // spent for nothing.
  Losses reference_until(int world, int64_t last, const TrainShape& shape) {
    const std::string name = "reference-" + std::to_string(world) + "-until-" + std::to_string(last);
    run_reference(world, name, shape, last);
    return losses_of(dir_ / (name + "/metrics.jsonl"));
  }

  // Loss per step of a fault-free run at this world size resumed from the faulted run's own
  // checkpoint of `step` (copied: a fresh run directory holding only that checkpoint), up to
  // step `last` (train.stop_at: the schedule still that of steps_; a segment that ended early
  // needs no reference to the end, which took most of a 300-step test's time).
  Losses resumed_reference(int world, int64_t step, int64_t last) {
    std::string name = "reference-" + std::to_string(world) + "-from-" + std::to_string(step);
    std::string from = run_dir_ + "/checkpoints/step-" + step_digits(step);
    std::filesystem::create_directories(dir_ / (name + "/checkpoints"));
    std::filesystem::copy(from, dir_ / (name + "/checkpoints/step-" + step_digits(step)),
                          std::filesystem::copy_options::recursive);
    if (run_reference(world, name, shape_, last).find("train: resumed from") == std::string::npos)
      throw std::runtime_error("reference run " + name + " did not resume");
    return losses_of(dir_ / (name + "/metrics.jsonl"));
  }
  // Loss per step after `step` of a fault-free run that trains on `first` ranks (shape
  // `first_shape`) to that step, checkpoints it, and goes on from that checkpoint on `then` ranks
  // (`then_shape`): what a group that changed size after `step` must give, bit for bit. The first
  // run stops at its checkpoint.
  Losses switched_reference(int first, TrainShape first_shape, int64_t step, int then, const TrainShape& then_shape) {
    first_shape.checkpoint_interval = static_cast<int>(step);
    const std::string before = "switch-before-" + std::to_string(step), after = "switch-after-" + std::to_string(step);
    run_reference(first, before, first_shape, step);
    std::filesystem::create_directories(dir_ / (after + "/checkpoints"));
    std::filesystem::copy(dir_ / (before + "/checkpoints/step-" + step_digits(step)),
                          dir_ / (after + "/checkpoints/step-" + step_digits(step)),
                          std::filesystem::copy_options::recursive);
    if (run_reference(then, after, then_shape, steps_).find("train: resumed from") == std::string::npos)
      throw std::runtime_error("reference run " + after + " did not resume");
    return losses_of(dir_ / (after + "/metrics.jsonl"));
  }
  static std::string step_digits(int64_t step) {
    char digits[24];
    std::snprintf(digits, sizeof digits, "%08lld", static_cast<long long>(step));
    return digits;
  }

  void SetUp() override {
    ASSERT_TRUE(VirtualHosts::have_privileges())
        << "the netfault tests need root: they create network namespaces, veths and a bridge "
           "(run `ctest -L netfault` as root; CI does)";
    hosts_ = std::make_unique<VirtualHosts>(3);
    run_dir_ = dir_ / "run";
    watch_ = std::make_unique<MetricsWatch>(run_dir_ + "/metrics.jsonl");
    started_ = Clock::now();
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s", dump().c_str());
    agents_.clear();  // SIGKILL and reap what is left, then etcd, then the namespaces go
    etcd_.reset();
    hosts_.reset();
  }

  // One agent on host i (a restart gets a fresh output file and log directory).
  void start_agent(int host, const std::string& tag = "") {
    std::string name = "h" + std::to_string(host) + tag;
    std::string endpoint = etcd_ ? etcd_->endpoints() : hosts_->address(0) + ":" + kStorePort;
    std::vector<std::string> argv = {CADRE_BIN, "run", "--nnodes", "2:3", "--nproc-per-node",
                                     std::to_string(workers_per_host_), "--rdzv-backend", etcd_ ? "etcd" : "c10d", "--rdzv-endpoint", endpoint,
                                     "--rdzv-id", "netfault",
                                     "--max-restarts", "3", "--monitor-interval", "0.05", "--stop-timeout", "3",
                                     "--recovery", recovery_, "--rdzv-conf", rdzv_conf(), "--log-dir",
                                     dir_ / ("logs-" + name)};
    auto flags = agent_flags_.count(host) ? agent_flags_.at(host) : agent_flags_[kEveryHost];
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    auto train = train_args(data_dir_, run_dir_, steps_, timeouts_.comm_s, shape_);
    argv.insert(argv.end(), train.begin(), train.end());
    // The hosts share the job secret through the environment (etcd agrees on one by itself).
    agents_[host] = std::make_unique<Proc>(
        hosts_->command(host, argv, {"OMP_NUM_THREADS=1", "CADRE_JOB_SECRET=netfault-job-secret-0123456789"}),
        dir_ / ("agent-" + name + ".out"));
  }
  std::string rdzv_conf() const {
    return "last_call_timeout=" + std::to_string(timeouts_.last_call_s) +
           ",heartbeat_timeout=" + std::to_string(timeouts_.heartbeat_s) +
           ",join_timeout=90,store_timeout=" + std::to_string(timeouts_.store_s) + ",exit_linger=5";
  }
  std::string output(int host) const { return agents_.at(host)->output(); }
  // Where each survivor's output ends now, to look for what they print after.
  std::vector<size_t> survivor_offsets() const {
    std::vector<size_t> at;
    for (int h : survivors_) at.push_back(output(h).size());
    return at;
  }
  // A survivor's agent has ended the round for the waiting host: from here the scale-up happens
  // whatever the workers do, so a WorkerHold may be released.
  bool survivor_began_scale_up(const std::vector<size_t>& offsets) const {
    for (size_t i = 0; i < survivors_.size(); ++i)
      if (output(survivors_[i]).find("scale-up: ", offsets[i]) != std::string::npos) return true;
    return false;
  }
  // Freezes (SIGSTOP) every process on these hosts except their agents, until release() or
  // destruction (SIGCONT). Holding the smaller group's workers while a host comes back pins the
  // interleaving: the scale-up happens while the group still trains, however fast the machine is.
  // Agents keep heartbeating meanwhile, and a hold of a few seconds stays far below the workers'
  // collective deadline (both sides of every collective are frozen alike).
  class WorkerHold {
   public:
    WorkerHold(const NetFault& test, const std::vector<int>& hosts) {
      auto cmdline = [](int pid) { return read_file("/proc/" + std::to_string(pid) + "/cmdline"); };
      for (int h : hosts) {
        // The agent, and its process-group guard (a fork of it: the same command line), go on.
        const std::string agent = cmdline(test.agents_.at(h)->pid());
        for (int pid : test.hosts_->pids(h))
          if (pid != test.agents_.at(h)->pid() && cmdline(pid) != agent) pids_.push_back(pid);
      }
      for (int pid : pids_) ::kill(pid, SIGSTOP);
    }
    ~WorkerHold() { release(); }
    WorkerHold(const WorkerHold&) = delete;
    WorkerHold& operator=(const WorkerHold&) = delete;
    void release() {
      for (int pid : pids_) ::kill(pid, SIGCONT);
      pids_.clear();
    }
    size_t size() const { return pids_.size(); }

   private:
    std::vector<int> pids_;
  };

  // The agent's own last error line (not a worker's), for the report.
  std::string last_error_line(int host) const {
    std::istringstream lines(output(host));
    std::string last;
    for (std::string line; std::getline(lines, line);)
      if (line.find("[rank") == std::string::npos && line.find(" error ") != std::string::npos) last = line;
    return last;
  }
  std::string survivors_output() const {
    std::string out;
    for (int h : survivors_) out += output(h);
    return out;
  }
  // Every agent's output, the lost host's included (its agent may live on and its new worker
  // may hold group rank 0).
  std::string every_output() const {
    std::string out;
    for (const auto& [host, agent] : agents_) out += agent->output();
    return out;
  }

  // The rendezvous in etcd, on the switch (no host): any host may die.
  void use_etcd() {
    cadre::test::EtcdClusterOptions options;
    options.hosts = {hosts_->switch_address()};
    hosts_->run_on_switch([&] { etcd_ = std::make_unique<cadre::test::EtcdCluster>(options); });
  }

  // Timed events: `cond` is checked at every poll of wait_for; the first time it holds is kept.
  void watch_event(const std::string& name, std::function<bool()> cond) { pending_[name] = std::move(cond); }
  bool seen(const std::string& name) const { return events_.count(name) > 0; }
  double event_s(const std::string& name, Clock::time_point since) const { return seconds(events_.at(name) - since); }

  // Polls metrics.jsonl (tagging new segments with the world size of the round now running)
  // every 20 ms until cond holds; false after timeout_s.
  bool wait_for(const std::function<bool()>& cond, double timeout_s) {
    return launch_test::wait_until([&] {
      watch_->poll();
      RoundLine round = last_round();
      if (round.number != round_seen_) {  // records from now on belong to the new round
        round_seen_ = round.number;
        watch_->start_segment();
      }
      for (auto& s : watch_->segments())
        if (s.world_size == 0) s.world_size = round.world_size;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second()) {
          events_[it->first] = Clock::now();
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      return cond();
    }, timeout_s);
  }
  // The newest round host 0's agent started ("round k: group rank g of n nodes, ranks a..b of W,
  // restart count c, ...").
  struct RoundLine {
    int64_t number = -1, world_size = 0, restart_count = -1;
  };
  RoundLine last_round() const {
    static const std::regex round_line(
        R"(round (\d+): group rank \d+ of \d+ nodes, ranks \d+\.\.\d+ of (\d+), restart count (\d+))");
    std::string out = output(survivors_.front());
    RoundLine last;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), round_line); it != std::sregex_iterator(); ++it)
      last = {std::stoll((*it)[1]), std::stoll((*it)[2]), std::stoll((*it)[3])};
    return last;
  }
  int64_t current_world_size() const { return last_round().world_size; }
  // The host whose agent holds group rank `g` in the newest round it logged (-1: none): nodes are
  // ranked in the order they joined round 0.
  int host_of_group_rank(int64_t g) const {
    static const std::regex round_line(R"(round \d+: group rank (\d+) of \d+ nodes)");
    for (const auto& [host, agent] : agents_) {
      const std::string out = agent->output();
      int64_t last = -1;
      for (auto it = std::sregex_iterator(out.begin(), out.end(), round_line); it != std::sregex_iterator(); ++it)
        last = std::stoll((*it)[1]);
      if (last == g) return host;
    }
    return -1;
  }
  const std::vector<Segment>& segments() const { return watch_->segments(); }
  bool has_segment(int64_t world, size_t min_steps, size_t after = 0) const {
    for (size_t i = after; i < segments().size(); ++i)
      if (segments()[i].world_size == world && segments()[i].steps.size() >= min_steps) return true;
    return false;
  }

  // First line that appeared in a surviving agent's output after `offsets` saying the round ended.
  std::string detection_line(const std::map<int, size_t>& offsets) const {
    for (const auto& [host, offset] : offsets) {
      std::string fresh = output(host).substr(std::min(offset, output(host).size()));
      std::istringstream lines(fresh);
      for (std::string line; std::getline(lines, line);)
        if (line.find("[rank") == std::string::npos &&
            (line.find(" ended: ") != std::string::npos || line.find("re-forming the group") != std::string::npos ||
             line.find(") failed with ") != std::string::npos))
          return line;
    }
    return "";
  }

  // The newest checkpoint due by the last step done is committed. The background writer runs
  // at idle priority and on a loaded machine may commit a save steps after it was taken; a fault
  // before that commit loses more than an interval of steps, which the recovery tests hold the
  // job to. What they test is recovery, not how far the writer lags: they fault once it is done.
  bool due_checkpoint_committed() const {
    const int interval = shape_.checkpoint_interval;
    if (interval <= 0 || segments().empty()) return true;
    return newest_committed_step(run_dir_) >= segments().back().last_step() / interval * interval;
  }

  // Runs until host 2 has trained kFaultAfterStep steps in a 3-node round and the checkpoint due
  // by then is committed; returns the last step done and the survivors' output sizes (for
  // detection_line).
  std::pair<int64_t, std::map<int, size_t>> train_until_fault_point() {
    for (int h = 0; h < 3; ++h) start_agent(h);
    EXPECT_TRUE(wait_for([&] { return has_segment(ranks(3), kFaultAfterStep) && due_checkpoint_committed(); }, 180))
        << "no 3-node round reached step " << kFaultAfterStep << " with its due checkpoint committed";
    std::map<int, size_t> offsets;
    for (int h : survivors_) offsets[h] = output(h).size();
    return {segments().back().last_step(), offsets};
  }

  // Every segment matches a fault-free run at its world size from the same starting point (step 0,
  // or the checkpoint it resumed from), step for step.
  void expect_segments_match_reference() {
    for (size_t i = 0; i < segments().size(); ++i) {
      const Segment& s = segments()[i];
      ASSERT_GT(s.world_size, 0) << "segment " << i;
      const int world = static_cast<int>(s.world_size);
      const Losses ref = s.first_step() == 1 ? reference(world, steps_)
                                             : resumed_reference(world, s.first_step() - 1, s.last_step());
      double max_diff = 0;
      for (const auto& r : s.steps) {
        ASSERT_TRUE(ref.count(r.step)) << "segment " << i << ": the reference has no step " << r.step;
        EXPECT_NEAR(r.loss, ref.at(r.step), kLossTolerance)
            << "segment " << i << " (world size " << s.world_size << ", from step " << s.first_step() << "), step "
            << r.step;
        max_diff = std::max(max_diff, std::abs(r.loss - ref.at(r.step)));
      }
      std::printf("[netfault] segment %zu: world size %lld, steps %lld..%lld; fault-free reference from %s: max |loss "
                  "difference| %.3g\n",
                  i, static_cast<long long>(s.world_size), static_cast<long long>(s.first_step()),
                  static_cast<long long>(s.last_step()),
                  s.first_step() == 1 ? "scratch" : ("step " + std::to_string(s.first_step() - 1)).c_str(), max_diff);
    }
  }

  // Checkpoint resume (issue #6): the re-formed group continued from the newest complete
  // checkpoint at the fault (or one committed in the moment around it), and said so.
  void expect_resume(const FaultReport& report) {
    const int64_t resumed_from = report.resumed_step - 1;
    EXPECT_GE(resumed_from, report.committed) << "resumed from an older checkpoint than the newest complete one";
    EXPECT_LE(resumed_from, report.fault_step);
    EXPECT_GT(resumed_from, 0) << "the re-formed group started from scratch";
    EXPECT_EQ(resumed_from % kCheckpointInterval, 0);
    EXPECT_LE(report.fault_step - resumed_from, kCheckpointInterval) << "steps lost";
    std::string line = "train: resumed from " + run_dir_ + "/checkpoints/step-" + step_digits(resumed_from) +
                       " at step " + std::to_string(resumed_from);
    EXPECT_NE(survivors_output().find(line), std::string::npos) << "no '" << line << "' in the survivors' logs";
  }

  // A scale-up stops the workers with SIGTERM: they finish the step, checkpoint it and exit, so
  // the bigger group goes on from the next step.
  void expect_scale_up_lost_no_step() {
    ASSERT_GE(segments().size(), 2u);
    const Segment& before = segments()[segments().size() - 2];
    EXPECT_EQ(segments().back().first_step(), before.last_step() + 1) << "steps lost in the scale-up";
  }

  std::string dump() const {
    std::string out;
    for (const auto& [host, agent] : agents_) {
      std::string text = agent->output();
      if (text.size() > 6000) text = "...\n" + text.substr(text.size() - 6000);
      out += "---- agent on host " + std::to_string(host) + " ----\n" + text;
    }
    for (size_t i = 0; i < segments().size(); ++i)
      out += "segment " + std::to_string(i) + ": world " + std::to_string(segments()[i].world_size) + ", steps " +
             std::to_string(segments()[i].first_step()) + ".." + std::to_string(segments()[i].last_step()) + "\n";
    return out;
  }

  static cadre::test::TempDir* shared_;
  static std::string data_dir_;
  cadre::test::TempDir dir_{"netfault"};
  std::unique_ptr<VirtualHosts> hosts_;   // declared before agents_: torn down after them
  std::unique_ptr<cadre::test::EtcdCluster> etcd_;  // set by use_etcd()
  std::map<int, std::unique_ptr<Proc>> agents_;
  std::string run_dir_;
  std::unique_ptr<MetricsWatch> watch_;
  Clock::time_point started_;
  Timeouts timeouts_;
  // What every scenario does before its fault: train to the fault point, note where the
  // report starts, and watch the survivors' logs for the detection.
  void begin_fault(const std::string& scenario) {
    auto [fault_step, offsets] = train_until_fault_point();
    ASSERT_FALSE(HasFailure());
    offsets_ = offsets;
    report_.scenario = scenario;
    report_.fault_step = fault_step;
    report_.committed = newest_committed_step(run_dir_);
    segments_before_ = segments().size();
    watch_event("detected", [this] { return !(report_.detected_by = detection_line(offsets_)).empty(); });
  }

  // After the fault at `t_fault`: the survivors re-form with 2 nodes; detection and resume
  // times go into the report.
  void expect_reformed(Clock::time_point t_fault, const std::string& failure_message) {
    ASSERT_TRUE(wait_for([&] { return has_segment(ranks(2), 1, segments_before_); }, 120)) << failure_message;
    ASSERT_TRUE(seen("detected"));
    report_.detect_s = event_s("detected", t_fault);
    report_.resume_s = seconds(segments().back().steps.front().seen - t_fault);
    report_.resumed_step = segments().back().first_step();
    // A step may complete while the fault lands (the fault step was read before the cut, and a
    // CI run saw the group resume from the checkpoint of the step after it): the fault step is
    // the last one the group before the fault logged.
    if (segments_before_ > 0)
      report_.fault_step = std::max(report_.fault_step, segments()[segments_before_ - 1].last_step());
  }

  // --- in-memory recovery ------------------------------------------------------------------

  // Replicated training, 6 micro-batches a step, no checkpoint before the end, and the agents'
  // in-memory recovery.
  void expect_joining_host_takes_live_state();
  void use_memory_recovery() {
    recovery_ = "memory";
    shape_ = TrainShape{"NO_SHARD", 2, 0};
  }
  // Sharded state in memory: every rank's part copied to its buddy every kMemoryInterval steps.
  static constexpr int kMemoryInterval = 5;
  void use_sharded_memory_recovery() {
    recovery_ = "memory";
    shape_ = TrainShape{"FULL_SHARD", 2, 0, kMemoryInterval};
  }
  // Replicated pipeline stages in memory: 2 workers a host as pp 2 (dp 3 on 3 hosts, 2 on 2), 16 steps.
  void use_pipeline_memory_recovery() {
    use_memory_recovery();
    shape_.pp_size = 2;
    workers_per_host_ = 2;
    steps_ = 16;
  }
  // The same with sharded stages (FULL_SHARD), copied every kMemoryInterval steps.
  void use_sharded_pipeline_memory_recovery() {
    use_pipeline_memory_recovery();
    shape_.strategy = "FULL_SHARD";
    shape_.memory_interval = kMemoryInterval;
  }
  // The same job on `world` ranks with the global batch of 6 micro-batches kept (over the
  // data-parallel ranks: world / pp_size).
  TrainShape shape_on(int world) const {
    TrainShape shape = shape_;
    shape.grad_accum_steps = 6 * shape.pp_size / world;
    return shape;
  }
  // The ranks of `hosts` hosts.
  int ranks(int hosts) const { return hosts * workers_per_host_; }
  // Nothing may come from disk: the checkpoint directory becomes a file (any read or write of
  // it fails) until unblock_checkpoints(), which the final save needs.
  void block_checkpoints() {
    std::filesystem::remove_all(run_dir_ + "/checkpoints");
    cadre::test::write_text(run_dir_ + "/checkpoints", "not a directory: in-memory recovery must not touch disk\n");
  }
  void unblock_checkpoints() { std::filesystem::remove(run_dir_ + "/checkpoints"); }
  // The processes on a host (agent, its guard, workers), for "nothing was restarted".
  std::set<int> processes(int host) const {
    auto pids = hosts_->pids(host);
    return std::set<int>(pids.begin(), pids.end());
  }
  // A host's worker: its one process that is neither the agent nor the agent's guard (a fork of
  // the agent, so the same command line).
  int worker_pid(int host) const {
    auto cmdline = [](int pid) { return read_file("/proc/" + std::to_string(pid) + "/cmdline"); };
    const std::string agent = cmdline(agents_.at(host)->pid());
    for (int pid : hosts_->pids(host))
      if (pid != agents_.at(host)->pid() && cmdline(pid) != agent) return pid;
    return -1;
  }
  // The earliest step a group may go on from after a fault once `logged` steps were logged:
  // that step with replicated state, at most memory_interval steps back with sharded state.
  int64_t earliest_recovery_step(int64_t logged) const {
    return shape_.memory_interval > 0 ? logged - shape_.memory_interval : logged;
  }
  // The re-formed group's first record is step from + 1, or step `from` itself when rank 0 never
  // wrote that one before the fault: a step can complete on one rank and not another (a killed
  // peer's last all-reduce reached some ranks), and the new rank 0 writes the record that came
  // with the state. CI saw both with the job store's host cut and with host 2's worker killed.
  void expect_goes_on_from(int64_t from) const {
    const int64_t first = segments().back().first_step();
    EXPECT_TRUE(first == from + 1 || first == from)
        << "the re-formed group did not go on from where it was: its first record is step " << first
        << ", the state it took is step " << from;
  }
  // metrics.jsonl holds steps 1..steps_ in order, each once: none lost, none repeated.
  void expect_each_step_logged_once() const {
    std::vector<int64_t> every(static_cast<size_t>(steps_));
    std::iota(every.begin(), every.end(), int64_t{1});
    EXPECT_EQ(steps_logged(run_dir_ + "/metrics.jsonl"), every) << "steps lost or repeated";
  }
  // "recovery: N rank(s) go on from step S in memory (state of rank R, ...": S, or -1.
  int64_t memory_recovery_step(const std::string& text) const {
    static const std::regex line(R"(recovery: \d+ rank\(s\) go on from step (\d+) in memory)");
    std::smatch m;
    return std::regex_search(text, m, line) ? std::stoll(m[1]) : -1;
  }
  // Host 2's worker gets `sig` (SIGKILL: a crash, SIGSTOP: a hang) while nothing can be read from
  // disk; followed until every agent finished: a 3-rank group again from the most advanced live
  // state, which crossed the network, the survivors' processes unchanged, every loss equal to the
  // fault-free run's. Fills replaced_.
  void expect_host2_worker_replaced_from_memory(int sig) {
    block_checkpoints();
    std::map<int, std::set<int>> before;
    for (int h : survivors_) before[h] = processes(h);
    const int victim = worker_pid(2);
    ASSERT_GT(victim, 0);
    auto t_fault = Clock::now();
    ASSERT_EQ(::kill(victim, sig), 0);

    ASSERT_TRUE(wait_for([&] { return has_segment(3, 1, segments_before_); }, 120)) << "no 3-rank group after the fault";
    replaced_.resume_s = seconds(segments().back().steps.front().seen - t_fault);
    unblock_checkpoints();
    for (int h : survivors_) EXPECT_EQ(processes(h), before[h]) << "host " << h << "'s processes changed";
    EXPECT_NE(worker_pid(2), victim);
    for (int h = 0; h < 3; ++h) {
      ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
      EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
    }
    watch_->poll();
    // Group rank 0 logs the recovery. Nodes keep their group ranks, so when host 2 joined round
    // 0 first, its replacement worker is rank 0 again (CI saw it): read every host's output.
    const std::string all = every_output();
    replaced_.from = memory_recovery_step(all);
    ASSERT_GE(replaced_.from, earliest_recovery_step(report_.fault_step)) << all;
    expect_goes_on_from(replaced_.from);
    EXPECT_NE(all.find("MB sent over the network"), std::string::npos) << "the newcomer got no state: " << all;
    EXPECT_EQ(all.find("train: resumed from"), std::string::npos) << "a checkpoint was read";
    const Losses& three = reference(3, steps_, shape_);
    expect_each_step_logged_once();
    const Losses logged = losses_of(run_dir_ + "/metrics.jsonl");
    for (const auto& [step, loss] : logged) EXPECT_EQ(loss, three.at(step)) << "step " << step;
  }
  struct Replaced {
    double resume_s = -1;  // fault -> first step of the re-formed group
    int64_t from = -1;     // the step the adopted state was at
  } replaced_;

  // Largest |a - b| over the steps both have.
  // The survivors' processes and the last step logged, taken just before host 2 is lost.
  struct SurvivorsAtFault {
    std::map<int, std::set<int>> processes;
    int64_t logged = 0;
  };
  SurvivorsAtFault survivors_at_fault() {
    SurvivorsAtFault at;
    for (int h : survivors_) at.processes[h] = processes(h);
    at.logged = segments().back().last_step();
    return at;
  }
  // Host 2's link is cut after begin_fault(scenario) while nothing can be read from disk, and the
  // survivors re-form with 2; `at_fault` gets their state at the cut. A 10 s last call makes a
  // re-formation that waited for the cut host show. Issue #26's goal, training again under 2 s
  // of the fault, detection included, needs a heartbeat deadline under ~1.7 s (a re-formation
  // takes ~0.2 s after it): 1 s here, also with two busy loops beside the test (no false
  // "stopped heartbeating": beats every 0.1 s).
  void cut_host2_under_memory_recovery(const std::string& scenario, SurvivorsAtFault* at_fault) {
    timeouts_.last_call_s = 10;
    timeouts_.heartbeat_s = 1;
    begin_fault(scenario);
    if (HasFailure()) return;
    block_checkpoints();
    *at_fault = survivors_at_fault();
    const auto t_fault = Clock::now();
    hosts_->cut(2);
    expect_reformed(t_fault, "the survivors did not re-form with 2");
  }

  // Kills the host that holds ranks 4 and 5 (hosts are ranked in the order they joined) after
  // begin_fault(scenario) while nothing can be read from disk, and waits for the survivors to
  // re-form; `at_fault` gets their state at the kill.
  void kill_host_of_ranks_4_and_5_under_memory_recovery(const std::string& scenario, SurvivorsAtFault* at_fault) {
    begin_fault(scenario);
    ASSERT_FALSE(HasFailure());
    const int victim = host_of_group_rank(2);
    ASSERT_GE(victim, 0) << every_output();
    survivors_.clear();
    offsets_.clear();
    for (int h = 0; h < 3; ++h)
      if (h != victim) {
        survivors_.push_back(h);
        offsets_[h] = output(h).size();
      }
    block_checkpoints();
    *at_fault = survivors_at_fault();
    auto t_fault = Clock::now();
    hosts_->kill_all(victim);
    ASSERT_TRUE(agents_[victim]->wait_exit(10));
    expect_reformed(t_fault, "the survivors did not re-form with 2 hosts");
  }

  // After host 2 was lost under --recovery memory: hosts 0 and 1 kept their processes, went on
  // with 2 ranks from the step they were in (replicated state; sharded state: from the newest step
  // whose copies every part has in a survivor's memory, at most checkpoint.memory_interval steps
  // back) without reading a checkpoint (global batch kept) and trained to the end. Before that
  // step every loss is the fault-free 3-rank run's, to the bit;
  // after it the 6 micro-batches are reduced over 2 ranks instead of 3, an order that changes
  // float32 rounding only: within what a fault-free 2-rank run with the same global batch differs
  // from the 3-rank one (`spread`, over the whole run) plus 2 ulps of the logged loss (a float32
  // sum of 6 micro-batch losses in another order); a different global batch would differ by
  // orders of magnitude more (~1e-2 here). And exactly: equal, bit for bit, to a fault-free run
  // that went from 3 to 2 ranks through a checkpoint of the step the survivors went on from.
  void expect_survivors_went_on_from_memory(const SurvivorsAtFault& at_fault) {
    unblock_checkpoints();
    for (int h : survivors_) {
      EXPECT_EQ(processes(h), at_fault.processes.at(h)) << "host " << h << "'s processes changed";
      EXPECT_NE(output(h).find("live worker(s) go on into it without a restart"), std::string::npos) << output(h);
    }
    for (int h : survivors_) {
      ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
      EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
    }
    watch_->poll();
    const Segment& last = segments().back();
    ASSERT_EQ(last.world_size, ranks(2));
    EXPECT_EQ(last.last_step(), steps_) << "the 2-node group did not train to the end";
    // The most advanced survivor's state, at or after the last step logged before the fault (a
    // step can complete on one survivor and not another).
    const std::string survivors = survivors_output();
    const int64_t from = memory_recovery_step(survivors);
    ASSERT_GE(from, earliest_recovery_step(at_fault.logged)) << survivors;
    if (shape_.memory_interval > 0) {  // copies every memory_interval steps
      EXPECT_EQ(from % shape_.memory_interval, 0) << survivors;
      const std::string copies = "copies of the " + std::to_string(ranks(3)) + " ranks' parts";
      EXPECT_NE(survivors.find(copies), std::string::npos) << survivors;
    }
    expect_goes_on_from(from);
    EXPECT_EQ(survivors.find("train: resumed from"), std::string::npos) << "a checkpoint was read";
    EXPECT_NE(survivors.find("keeps the global batch of 6 x 4 samples"), std::string::npos) << survivors;

    const Losses& three = reference(ranks(3), steps_, shape_);
    const Losses& two = reference(ranks(2), steps_, shape_on(ranks(2)));
    const double spread = max_difference(two, three);
    auto ulp = [](double x) {
      const float f = static_cast<float>(std::abs(x));
      return static_cast<double>(std::nextafter(f, INFINITY) - f);
    };
    const Losses switched = switched_reference(ranks(3), shape_, from, ranks(2), shape_on(ranks(2)));
    // What metrics.jsonl holds at the end: a group that went back to an older step (sharded
    // state) cut it back and logged the steps after it again.
    expect_each_step_logged_once();
    const Losses logged = losses_of(run_dir_ + "/metrics.jsonl");
    for (const auto& [step, loss] : logged) {
      ASSERT_TRUE(three.count(step));
      if (step <= from) {
        EXPECT_EQ(loss, three.at(step)) << "step " << step << " before the fault";
      } else {
        EXPECT_LE(std::abs(loss - three.at(step)), spread + 2 * ulp(loss)) << "step " << step << " after the fault";
        EXPECT_EQ(loss, switched.at(step)) << "step " << step << " after the fault";
      }
    }
    report_.resumed_step = last.first_step();
    report_.fault_step = std::max(report_.fault_step, from);  // a step may complete while the fault lands
    std::printf("%s; test %.1f s\n", report_.print().c_str(), seconds(Clock::now() - started_));
    std::smatch recovery_line;
    if (std::regex_search(survivors, recovery_line, std::regex(R"(recovery: \d+ rank\(s\) go on from step [^\n]*)")))
      std::printf("[netfault] %s\n", recovery_line.str().c_str());
    std::printf("[netfault] in memory: losses after the fault within %.3g of the fault-free %d-rank run (the %d- and "
                "%d-rank fault-free runs differ by up to %.3g)\n",
                max_difference(losses_of(run_dir_ + "/metrics.jsonl"), three), ranks(3), ranks(2), ranks(3), spread);
    RecordProperty("recovery_s", std::to_string(report_.resume_s));
  }

  static double max_difference(const Losses& a, const Losses& b) {
    double d = 0;
    for (const auto& [step, loss] : a)
      if (b.count(step)) d = std::max(d, std::abs(loss - b.at(step)));
    return d;
  }

  FaultReport report_;
  std::map<int, size_t> offsets_;  // survivors' log offsets at the fault point
  size_t segments_before_ = 0;
  int steps_ = kSteps;
  std::string recovery_ = "restart";  // cadre run --recovery
  // More of cadre run's flags: for a host, else for kEveryHost.
  static constexpr int kEveryHost = -1;
  std::map<int, std::vector<std::string>> agent_flags_;
  TrainShape shape_;
  int workers_per_host_ = 1;  // cadre run --nproc-per-node
  std::vector<int> survivors_ = {0, 1};  // hosts the fault spares; the first one's log is read
  int64_t round_seen_ = -1;
  std::map<std::string, std::function<bool()>> pending_;
  std::map<std::string, Clock::time_point> events_;
};
cadre::test::TempDir* NetFault::shared_ = nullptr;
std::string NetFault::data_dir_;

TEST_F(NetFault, KilledHostLeavesAndTheOthersFinish) {
  begin_fault("SIGKILL host 2");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  auto t_fault = Clock::now();
  hosts_->kill_all(2);  // agent and worker, like a machine losing power
  ASSERT_TRUE(agents_[2]->wait_exit(10));
  EXPECT_TRUE(hosts_->pids(2).empty());

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());

  for (int h : {0, 1}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 2);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 2-node group did not train to the end";
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; test %.1f s\n", report.print().c_str(), seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
}

// Issue #26: a lost node costs no step and no process restart. Host 2 dies (agent and worker);
// hosts 0 and 1 keep their workers, which re-form a 2-rank group from the state in their memory
// and go on from the step they were in, with the global batch kept (3 micro-batches a rank
// instead of 2). Nothing may come from disk: the checkpoint directory is unusable from before the
// fault until the survivors train again.
TEST_F(NetFault, KilledHostSurvivorsGoOnFromMemoryWithoutARestart) {
  use_memory_recovery();
  begin_fault("SIGKILL host 2, --recovery memory");
  ASSERT_FALSE(HasFailure());
  block_checkpoints();
  const SurvivorsAtFault at_fault = survivors_at_fault();
  auto t_fault = Clock::now();
  hosts_->kill_all(2);
  ASSERT_TRUE(agents_[2]->wait_exit(10));

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  expect_survivors_went_on_from_memory(at_fault);
}

// Pipeline stages (issue #53): 3 hosts x 2 workers train pp 2 x dp 3, NO_SHARD (stage 0 on ranks
// 0-2, stage 1 on 3-5: the host of ranks 2 and 3 holds one of each). The host of ranks 4 and 5
// (two of stage 1's three replicas) is killed; the survivors re-form as pp 2 x dp 2 without a
// restart, and rank 2, a stage-0 replica, is now one of stage 1's two ranks: it takes stage 1's
// state from rank 3 over the network while stage 0 keeps its own. Losses as for replicated
// state: the fault-free 6-rank run's up to the fault, and after it bit for bit those of a
// fault-free run that went from 6 to 4 ranks through a checkpoint of that step.
TEST_F(NetFault, KilledHostsPipelineStagesGoOnFromMemory) {
  use_pipeline_memory_recovery();
  SurvivorsAtFault at_fault;
  kill_host_of_ranks_4_and_5_under_memory_recovery("SIGKILL the host of ranks 4-5, pp 2 x dp 3, --recovery memory",
                                                   &at_fault);
  ASSERT_FALSE(HasFatalFailure());
  expect_survivors_went_on_from_memory(at_fault);
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("each of the 2 stages from its own survivors"), std::string::npos) << survivors;
  EXPECT_NE(survivors.find("MB sent over the network"), std::string::npos) << "the moved rank got no state: " << survivors;
}

// The same stages sharded (FULL_SHARD, copies every 5 steps on the buddy two ranks on, the next
// host): no survivor holds the parts of ranks 4 and 5, but the host of ranks 0 and 1 holds their
// copies. The survivors go back to the newest step every part has a copy of, and each fills its
// new stage's part from that stage's copies, whichever stage it held before (rank 2, a stage-0
// rank, now holds part of stage 1). The head is tied to the embedding: the last stage's copy of
// the table is in none of its ranks' copies and comes from the first stage's, and the two stages'
// gradients of it are summed again over the re-formed pipeline's ends. Losses as for replicated
// state: bit for bit those of a fault-free run that went from 6 to 4 ranks through a checkpoint
// of that step.
TEST_F(NetFault, KilledHostsShardedPipelineStagesComeBackFromTheirBuddysCopies) {
  use_sharded_pipeline_memory_recovery();
  shape_.tied = true;
  SurvivorsAtFault at_fault;
  kill_host_of_ranks_4_and_5_under_memory_recovery(
      "SIGKILL the host of ranks 4-5, pp 2 x dp 3, FULL_SHARD, --recovery memory", &at_fault);
  ASSERT_FALSE(HasFatalFailure());
  expect_survivors_went_on_from_memory(at_fault);
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("copies of the 6 ranks' parts of 2 pipeline stages"), std::string::npos) << survivors;
}

// The same stages losing host 2 by a cut link: nothing resets, so a stage waiting for its
// neighbour's activation or gradient would wait out parallel.comm_timeout (20 s). The agents'
// notice aborts the pipeline's links with the group's other communicators, and the survivors
// re-form within the heartbeat deadline.
TEST_F(NetFault, CutHostsPipelineStagesGoOnFromMemoryBeforeTheCollectiveTimeout) {
  use_pipeline_memory_recovery();
  SurvivorsAtFault at_fault;
  cut_host2_under_memory_recovery("link of host 2 cut, pp 2 x dp 3, --recovery memory", &at_fault);
  ASSERT_FALSE(HasFailure());
  EXPECT_LE(report_.resume_s, timeouts_.heartbeat_s + 3.0) << "the collective timeout or the last call was waited for";
  expect_survivors_went_on_from_memory(at_fault);
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("each of the 2 stages from its own survivors"), std::string::npos) << survivors;
  ASSERT_TRUE(agents_[2]->wait_exit(timeouts_.store_s + timeouts_.comm_s + 10)) << output(2);
}

// The same loss by a cut link (issue #26): nothing resets, so the survivors' collectives would
// wait out parallel.comm_timeout (20 s here) for host 2. Their agents find it silent after
// heartbeat_timeout, declare it dead (the next round does not wait for its open session) and
// tell their workers, which abort the collective they wait in and re-form from memory: training
// again within the heartbeat deadline plus a re-formation, far below the collective timeout.
TEST_F(NetFault, CutHostSurvivorsGoOnFromMemoryBeforeTheCollectiveTimeout) {
  use_memory_recovery();
  SurvivorsAtFault at_fault;
  cut_host2_under_memory_recovery("link of host 2 cut, --recovery memory", &at_fault);
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(report_.detected_by.find("stopped heartbeating"), std::string::npos) << report_.detected_by;
  // The collective in flight was aborted on the agents' word, not timed out (a survivor whose
  // notice came second may see the first one's aborted connections reset instead).
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("aborting its collectives"), std::string::npos) << survivors;
  EXPECT_NE(survivors.find("aborted: the agent reports a lost node: node"), std::string::npos) << survivors;
  // Heartbeats are checked every timeout/10 and the deadline runs from the last one seen; then
  // one re-formation (under a second in the other tests): nowhere near the 20 s collective
  // timeout, nor the 10 s last call a round waiting for the cut host's open session would take.
  EXPECT_LE(report_.resume_s, timeouts_.heartbeat_s + 3.0) << "the collective timeout or the last call was waited for";
  expect_survivors_went_on_from_memory(at_fault);
  // The cut host's agent cannot reach the store: it gives up and takes its worker with it.
  ASSERT_TRUE(agents_[2]->wait_exit(timeouts_.store_s + timeouts_.comm_s + 10)) << output(2);
  EXPECT_NE(agents_[2]->exit_code(), 0) << output(2);
  EXPECT_TRUE(wait_for([&] { return hosts_->pids(2).empty(); }, 30)) << "processes left on the cut host";
}

// Sharded state (FULL_SHARD, issue #26): no survivor holds the cut host's part, but its buddy
// (host 0) holds a copy, refreshed every 5 steps. The survivors go back to the newest step every
// part has a copy of (at most 5 steps lost), assemble their new 2-rank parts from their copies
// over the network, and go on; losses as for replicated state, and bit for bit those of a
// fault-free run that went from 3 to 2 ranks through a checkpoint of that step.
TEST_F(NetFault, CutHostsShardedStateComesBackFromItsBuddysCopy) {
  use_sharded_memory_recovery();
  SurvivorsAtFault at_fault;
  cut_host2_under_memory_recovery("link of host 2 cut, FULL_SHARD, --recovery memory", &at_fault);
  ASSERT_FALSE(HasFailure());
  EXPECT_LE(report_.resume_s, timeouts_.heartbeat_s + 3.0) << "the collective timeout or the last call was waited for";
  expect_survivors_went_on_from_memory(at_fault);
  ASSERT_TRUE(agents_[2]->wait_exit(timeouts_.store_s + timeouts_.comm_s + 10)) << output(2);
}

// A worker dies and its node's agent starts another: the newcomer takes its state from the live
// ranks over the network (the survivors are not restarted), the world size is unchanged, and so
// every loss equals the fault-free run's to the bit.
TEST_F(NetFault, KilledWorkerIsReplacedFromItsPeersMemoryAndTheLossesStayExact) {
  use_memory_recovery();
  begin_fault("SIGKILL host 2's worker, --recovery memory");
  ASSERT_FALSE(HasFailure());
  expect_host2_worker_replaced_from_memory(SIGKILL);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(last_round().restart_count, 1) << "a worker failure counts against --max-restarts";
  std::printf("[netfault] SIGKILL host 2's worker, --recovery memory: fault after step %lld; the replacement "
              "trained with the others %.2f s after the kill, from step %lld; every loss equal to the fault-free run\n",
              static_cast<long long>(report_.fault_step), replaced_.resume_s, static_cast<long long>(replaced_.from));
}

// A hang recovers as a crash does (issue #26): host 2's worker is stopped (SIGSTOP) mid-run. Every
// agent sees the stall; the diagnosis names the stopped rank, so only host 2's agent acts: it
// replaces its worker, which takes its state from the live ranks over the network. Hosts 0 and 1
// keep their workers (nothing restarted there), the world size is unchanged, and so every loss
// equals the fault-free run's to the bit. Host 2's stall timeout is the longer one, so that the
// others see the stall first and must leave it to host 2 (within max(2 x 2 s, 10 s) they do not
// act themselves): the order is pinned, not left to which agent polls first.
TEST_F(NetFault, HungWorkerIsReplacedFromItsPeersMemoryAndTheOthersStay) {
  use_memory_recovery();
  // Far above a step (~0.1 s), far below the 20 s collective deadline.
  constexpr double kStallTimeoutS = 2, kHungHostStallTimeoutS = 5;
  agent_flags_[kEveryHost] = {"--stall-timeout", std::to_string(kStallTimeoutS), "--stall-action", "restart"};
  agent_flags_[2] = {"--stall-timeout", std::to_string(kHungHostStallTimeoutS), "--stall-action", "restart"};
  begin_fault("SIGSTOP host 2's worker, --recovery memory");
  ASSERT_FALSE(HasFailure());
  expect_host2_worker_replaced_from_memory(SIGSTOP);
  ASSERT_FALSE(HasFatalFailure());
  // Host 2 named its own stopped rank and replaced it; the others named it too and left it to host 2.
  EXPECT_NE(output(2).find("replacing this node's workers"), std::string::npos) << output(2);
  for (int h : survivors_) {
    EXPECT_EQ(output(h).find("replacing this node's workers"), std::string::npos) << output(h);
    EXPECT_NE(output(h).find(" is not this node's: its node replaces it"), std::string::npos) << output(h);
  }
  std::printf("[netfault] SIGSTOP host 2's worker, --recovery memory (--stall-timeout %.0f s there): fault after step "
              "%lld; the replacement trained with the others %.2f s after the stop, from step %lld; every loss equal "
              "to the fault-free run\n",
              kHungHostStallTimeoutS, static_cast<long long>(report_.fault_step), replaced_.resume_s,
              static_cast<long long>(replaced_.from));
}

// Sharded state, a worker killed: its replacement holds nothing and the survivors roll back to the
// newest step every part has a copy of (the killed rank's at its buddy, host 0); the world size is
// unchanged, so every loss equals the fault-free run's to the bit, the repeated steps included.
TEST_F(NetFault, KilledWorkersShardedPartComesBackFromItsBuddysCopyAndTheLossesStayExact) {
  use_sharded_memory_recovery();
  begin_fault("SIGKILL host 2's worker, FULL_SHARD, --recovery memory");
  ASSERT_FALSE(HasFailure());
  expect_host2_worker_replaced_from_memory(SIGKILL);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(replaced_.from % kMemoryInterval, 0);
  std::printf("[netfault] SIGKILL host 2's worker, FULL_SHARD, --recovery memory: fault after step %lld; the "
              "replacement trained with the others %.2f s after the kill, from step %lld (copies every %d steps); "
              "every loss equal to the fault-free run\n",
              static_cast<long long>(report_.fault_step), replaced_.resume_s, static_cast<long long>(replaced_.from),
              kMemoryInterval);
}

// A node that joins a running job under --recovery memory takes its state from the live ranks
// over the network; the two running hosts keep their workers, nothing is read from disk and no
// step is lost. Two hosts train 6 micro-batches a step (3 a rank), host 2 starts after step 8;
// the three go on with 2 a rank. Before the join the losses equal the fault-free 2-rank run's to
// the bit; after it, those of a fault-free run that switched from 2 to 3 ranks through a
// checkpoint of the same step, to the bit.
TEST_F(NetFault, JoiningHostTakesItsStateFromLiveRanksAndNoStepIsLost) {
  use_memory_recovery();
  expect_joining_host_takes_live_state();
}

// The same with sharded state (FULL_SHARD): the group re-forms after a step every rank
// completed, so each packs its part of that step (not its last copy): nothing is lost either.
TEST_F(NetFault, JoiningHostTakesItsShardedPartFromLiveRanksAndNoStepIsLost) {
  use_sharded_memory_recovery();
  expect_joining_host_takes_live_state();
}

void NetFault::expect_joining_host_takes_live_state() {
  shape_.grad_accum_steps = 3;
  steps_ = 300;  // the 2-host group (~30 ms a step) must not finish before the third joins (~1 s)
  for (int h : {0, 1}) start_agent(h);
  ASSERT_TRUE(wait_for([&] { return has_segment(2, kFaultAfterStep); }, 180)) << "no 2-node round reached step "
                                                                              << kFaultAfterStep;
  block_checkpoints();
  std::map<int, std::set<int>> before;
  for (int h : survivors_) before[h] = processes(h);
  const size_t segments_before = segments().size();
  const int64_t logged_before_join = segments().back().last_step();
  auto t_join = Clock::now();
  start_agent(2);

  ASSERT_TRUE(wait_for([&] { return has_segment(3, 1, segments_before); }, 120)) << "host 2 did not join";
  const double join_s = seconds(segments().back().steps.front().seen - t_join);
  unblock_checkpoints();
  for (int h : survivors_) EXPECT_EQ(processes(h), before[h]) << "host " << h << "'s processes changed";
  for (int h = 0; h < 3; ++h) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 3);
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("the live workers re-form with them"), std::string::npos) << survivors;
  // Every step trained and logged once: the 2-rank group's last step, then the 3-rank group's.
  const int64_t from = memory_recovery_step(survivors);
  ASSERT_GE(from, logged_before_join) << survivors;
  expect_each_step_logged_once();
  const Losses logged = losses_of(run_dir_ + "/metrics.jsonl");
  EXPECT_NE(survivors.find("MB sent over the network"), std::string::npos) << "the newcomer got no state: " << survivors;
  EXPECT_NE(survivors.find("keeps the global batch of 6 x 4 samples"), std::string::npos) << survivors;
  EXPECT_EQ(survivors.find("train: resumed from"), std::string::npos) << "a checkpoint was read";
  EXPECT_EQ(last_round().restart_count, 0) << "a join is no failure";

  const Losses two = reference_until(2, from, shape_);
  const Losses switched = switched_reference(2, shape_, from, 3, shape_on(3));
  for (const auto& [step, loss] : logged) {
    if (step <= from)
      EXPECT_EQ(loss, two.at(step)) << "step " << step << " before the join";
    else
      EXPECT_EQ(loss, switched.at(step)) << "step " << step << " after the join";
  }
  std::printf("[netfault] host 2 joins a 2-host job, %s, --recovery memory: started after step %lld; trained with the "
              "others %.2f s later, from step %lld, no step lost; every loss equal to a fault-free run that went from "
              "2 to 3 ranks through a checkpoint of step %lld\n",
              shape_.strategy.c_str(), static_cast<long long>(logged_before_join), join_s, static_cast<long long>(from + 1),
              static_cast<long long>(from));
}

TEST_F(NetFault, CutHostIsDetectedThenRejoinsWhenBack) {
  // The survivors are held from their first step after re-forming until host 2 waits to rejoin;
  // 300 steps (~30 ms each on 2 ranks) leave seconds between that first step and the end, where
  // the hold needs milliseconds (30 steps were done in 0.5 s on a fast machine: no hold came in time).
  steps_ = 300;
  begin_fault("link of host 2 cut");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  watch_event("cut agent exited", [&] { return agents_[2]->wait_exit(0); });
  auto t_fault = Clock::now();
  hosts_->cut(2);

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  // Nobody was told: the only way to notice is the heartbeat deadline.
  EXPECT_NE(report.detected_by.find("stopped heartbeating"), std::string::npos) << report.detected_by;
  // The deadline runs from the last heartbeat seen, up to one beat interval (timeout/10) before the cut.
  EXPECT_GE(report.detect_s, timeouts_.heartbeat_s * 0.9 - 0.2);
  EXPECT_LE(report.detect_s, timeouts_.heartbeat_s + 3) << "detection is bounded by heartbeat_timeout";
  EXPECT_EQ(last_round().restart_count, 0) << "a lost node is a membership change, not a failure restart";
  size_t before_rejoin = segments().size();
  const std::vector<size_t> survivors_before = survivor_offsets();
  WorkerHold hold(*this, survivors_);
  ASSERT_EQ(hold.size(), survivors_.size()) << "one worker per surviving host";

  // The cut host's agent cannot reach the store: it must give up within store_timeout (plus a
  // heartbeat interval), stop its worker and exit non-zero, naming the store; not hang.
  ASSERT_TRUE(wait_for([&] { return seen("cut agent exited"); }, timeouts_.store_s + 10)) << output(2);
  double cut_agent_exit_s = event_s("cut agent exited", t_fault);
  EXPECT_LE(cut_agent_exit_s, timeouts_.store_s + timeouts_.heartbeat_s);
  EXPECT_EQ(agents_[2]->exit_code(), 1) << output(2);
  EXPECT_NE(output(2).find("rendezvous store " + hosts_->address(0) + ":" + kStorePort), std::string::npos) << output(2);
  EXPECT_TRUE(wait_for([&] { return hosts_->pids(2).empty(); }, 10)) << "processes left on the cut host";

  // Back: the link heals and the host's agent is started again; it joins the next round.
  hosts_->heal(2);
  auto t_back = Clock::now();
  start_agent(2, "-restarted");
  ASSERT_TRUE(wait_for([&] { return output(2).find("waiting for the next round") != std::string::npos; }, 60))
      << output(2);
  // Released before a survivor saw the waiting host, a fast group could train to the end first.
  ASSERT_TRUE(wait_for([&] { return survivor_began_scale_up(survivors_before); }, 60)) << output(survivors_[0]);
  hold.release();
  ASSERT_TRUE(wait_for([&] { return has_segment(3, 1, before_rejoin); }, 120)) << "host 2 did not rejoin";
  double rejoin_s = seconds(segments().back().steps.front().seen - t_back);
  expect_scale_up_lost_no_step();
  EXPECT_NE(output(0).find("scale-up: 1 node(s) waiting to join"), std::string::npos) << output(0);

  for (int h : {0, 1, 2}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 3);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 3-node group did not train to the end";
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; cut agent exited after %.2f s; host back -> training with 3 nodes after %.2f s; test %.1f s\n",
              report.print().c_str(), cut_agent_exit_s, rejoin_s, seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
  RecordProperty("rejoin_s", std::to_string(rejoin_s));
}

TEST_F(NetFault, CutHostCaughtByCommTimeoutWhenHeartbeatsAreSlow) {
  timeouts_.heartbeat_s = 30;
  timeouts_.comm_s = 5;
  begin_fault("link of host 2 cut, comm timeout first");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  auto t_fault = Clock::now();
  hosts_->cut(2);

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  // A survivor's collective gave up after comm_timeout; that worker failure ended the round and
  // counts as a restart. (The cut came in the middle of an op every rank had entered, so the
  // error says "every rank arrived" rather than naming rank 2: see docs/DESIGN.md.)
  EXPECT_NE(report.detected_by.find("failed with exit code 1"), std::string::npos) << report.detected_by;
  EXPECT_GE(report.detect_s, timeouts_.comm_s - 1);  // the op in flight may have begun before the cut
  EXPECT_LE(report.detect_s, timeouts_.comm_s + 3) << "detection is bounded by parallel.comm_timeout";
  EXPECT_TRUE(cadre::test::names_comm_timeout(output(0) + output(1), timeouts_.comm_s * 1000)) << output(0) << output(1);
  EXPECT_EQ(last_round().restart_count, 1);

  for (int h : {0, 1}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 2);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 2-node group did not train to the end";
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; test %.1f s\n", report.print().c_str(), seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
}

TEST_F(NetFault, ShortPartitionHealsAndTheHostRejoinsByItself) {
  timeouts_.store_s = 30;  // the cut host's agent outlives the outage
  begin_fault("link of host 2 cut, healed while its agent waits");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  const size_t cut_host_offset = output(2).size();
  auto t_fault = Clock::now();
  hosts_->cut(2);
  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_NE(report.detected_by.find("stopped heartbeating"), std::string::npos) << report.detected_by;

  size_t before_rejoin = segments().size();
  const std::vector<size_t> survivors_before = survivor_offsets();
  WorkerHold hold(*this, survivors_);
  ASSERT_EQ(hold.size(), survivors_.size()) << "one worker per surviving host";
  hosts_->heal(2);
  auto t_back = Clock::now();
  watch_event("cut host noticed", [&] { return output(2).find(" ended: ", cut_host_offset) != std::string::npos; });
  ASSERT_TRUE(wait_for([&] { return output(2).find("waiting for the next round", cut_host_offset) != std::string::npos; },
                       60))
      << output(2);
  // Released before a survivor saw the waiting host, a fast group could train to the end first.
  ASSERT_TRUE(wait_for([&] { return survivor_began_scale_up(survivors_before); }, 60)) << output(survivors_[0]);
  hold.release();
  ASSERT_TRUE(wait_for([&] { return has_segment(3, 1, before_rejoin); }, 120)) << "host 2 did not rejoin";
  double rejoin_s = seconds(segments().back().steps.front().seen - t_back);
  expect_scale_up_lost_no_step();
  ASSERT_TRUE(seen("cut host noticed")) << output(2);
  double noticed_s = event_s("cut host noticed", t_back);

  for (int h : {0, 1, 2}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);  // the same agent process all along
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 3);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 3-node group did not train to the end";
  EXPECT_EQ(last_round().restart_count, 0);
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; link back -> its agent saw the round had ended after %.2f s (TCP retransmission), training "
              "with 3 nodes after %.2f s; test %.1f s\n",
              report.print().c_str(), noticed_s, rejoin_s, seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
  RecordProperty("rejoin_s", std::to_string(rejoin_s));
}

// A SIGKILLed agent (its guard then kills its workers) under etcd: its lease lives on until
// heartbeat_timeout (10 s here), so its session key still says alive, and the survivors' round
// would wait for it until the last call (10 s here). Its liveness port, which the kernel closed
// as it died, tells them at once.
TEST_F(NetFault, KilledAgentWithEtcdIsNotWaitedForUntilItsLeaseEnds) {
  use_etcd();
  use_memory_recovery();
  timeouts_.last_call_s = 10;
  timeouts_.heartbeat_s = 10;
  begin_fault("SIGKILL host 2's agent, etcd rendezvous, --recovery memory");
  ASSERT_FALSE(HasFailure());
  block_checkpoints();
  SurvivorsAtFault at_fault = survivors_at_fault();
  // With etcd any host may hold group rank 0, which writes metrics.jsonl: its last step logged
  // may be one the others never completed (as in the job store host's cut, below).
  if (output(2).find("round 0: group rank 0 of 3 nodes") != std::string::npos)
    at_fault.logged = std::max<int64_t>(0, at_fault.logged - 1);
  const auto t_fault = Clock::now();
  ASSERT_EQ(::kill(agents_[2]->pid(), SIGKILL), 0);
  ASSERT_TRUE(agents_[2]->wait_exit(10));

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_LT(report_.resume_s, 5.0) << "the killed agent's lease or the last call was waited for";
  const std::string survivors = survivors_output();
  EXPECT_NE(survivors.find("nothing listens on its liveness port"), std::string::npos) << survivors;
  expect_survivors_went_on_from_memory(at_fault);
  EXPECT_TRUE(wait_for([&] { return hosts_->pids(2).empty(); }, 10)) << "host 2's workers outlived their agent";
}

TEST_F(NetFault, KilledHostZeroSurvivesWithEtcd) {
  use_etcd();
  survivors_ = {1, 2};
  begin_fault("SIGKILL host 0, etcd rendezvous");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  auto t_fault = Clock::now();
  hosts_->kill_all(0);  // with c10d this would end the job: the store lived in host 0's agent
  ASSERT_TRUE(agents_[0]->wait_exit(10));

  expect_reformed(t_fault, "hosts 1 and 2 did not re-form");
  ASSERT_FALSE(HasFatalFailure());

  for (int h : {1, 2}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 2);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 2-node group did not train to the end";
  EXPECT_NE(survivors_output().find(": group rank 0 of 2 nodes"), std::string::npos) << "rank 0 moved to host 1 or 2";
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; test %.1f s\n", report.print().c_str(), seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
}

// The cut host also held the group's job store (its rank 0 hosts it): each survivor's
// communicators publish their progress there in the background, and such a write blocks until
// the store's timeout (the collective timeout). Re-forming destroys those communicators, and
// must not wait for a write in flight: in the soak (collective timeout 5 s) this cost 2.4 s on
// about half the cuts, whenever the cut host held rank 0.
TEST_F(NetFault, CutJobStoreHostSurvivorsGoOnFromMemoryWithEtcd) {
  use_etcd();
  use_memory_recovery();
  begin_fault("link of the job store's host cut, etcd rendezvous, --recovery memory");
  ASSERT_FALSE(HasFailure());
  int victim = -1;
  for (int h : {0, 1, 2})
    if (output(h).find("round 0: group rank 0 of 3 nodes") != std::string::npos) victim = h;
  ASSERT_GE(victim, 0) << "no host holds group rank 0";
  survivors_.clear();
  offsets_.clear();  // where the detection line is looked for
  for (int h : {0, 1, 2})
    if (h != victim) {
      survivors_.push_back(h);
      offsets_[h] = output(h).size();
    }
  block_checkpoints();
  SurvivorsAtFault at_fault = survivors_at_fault();
  // The cut host's rank 0 writes metrics.jsonl: the last step it logged may be one whose last
  // collective never reached the others (the cut fell inside it); they redo it, the same step.
  at_fault.logged = std::max<int64_t>(0, at_fault.logged - 1);
  auto t_fault = Clock::now();
  hosts_->cut(victim);

  expect_reformed(t_fault, "the survivors did not re-form with 2");
  ASSERT_FALSE(HasFatalFailure());
  // Detection (the etcd lease, heartbeat_timeout) and a re-formation: not the 20 s a progress
  // write to the cut host's store takes to fail.
  EXPECT_LE(report_.resume_s, timeouts_.heartbeat_s + 3.0) << "a write to the cut host's job store was waited for";
  expect_survivors_went_on_from_memory(at_fault);
  ASSERT_TRUE(agents_[victim]->wait_exit(timeouts_.store_s + timeouts_.comm_s + 10)) << output(victim);
  EXPECT_NE(agents_[victim]->exit_code(), 0) << output(victim);
  std::printf("%s (host %d, group rank 0); test %.1f s\n", report_.print().c_str(), victim,
              seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report_.resume_s));
}

TEST_F(NetFault, CutHostZeroWithEtcdTheOthersFinishAndItGivesUp) {
  use_etcd();
  survivors_ = {1, 2};
  begin_fault("link of host 0 cut, etcd rendezvous");
  ASSERT_FALSE(HasFailure());
  FaultReport& report = report_;
  watch_event("cut agent exited", [&] { return agents_[0]->wait_exit(0); });
  auto t_fault = Clock::now();
  hosts_->cut(0);

  expect_reformed(t_fault, "hosts 1 and 2 did not re-form");
  ASSERT_FALSE(HasFatalFailure());
  // The cut host cannot reach etcd: its agent must give up and take its worker with it.
  ASSERT_TRUE(wait_for([&] { return seen("cut agent exited"); }, 60)) << output(0);
  double cut_agent_exit_s = event_s("cut agent exited", t_fault);
  EXPECT_NE(agents_[0]->exit_code(), 0) << output(0);
  EXPECT_TRUE(wait_for([&] { return hosts_->pids(0).empty(); }, 10)) << "processes left on the cut host";

  for (int h : {1, 2}) {
    ASSERT_TRUE(agents_[h]->wait_exit(180)) << "host " << h << " did not finish";
    EXPECT_EQ(agents_[h]->exit_code(), 0) << output(h);
  }
  watch_->poll();
  ASSERT_EQ(segments().back().world_size, 2);
  EXPECT_EQ(segments().back().last_step(), steps_) << "the 2-node group did not train to the end";
  expect_segments_match_reference();
  expect_resume(report);
  std::printf("%s; cut agent exited after %.2f s (%s); test %.1f s\n", report.print().c_str(), cut_agent_exit_s,
              last_error_line(0).c_str(), seconds(Clock::now() - started_));
  RecordProperty("recovery_s", std::to_string(report.resume_s));
}

}  // namespace
