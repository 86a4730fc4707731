// Recovery soak (issue #26; `make soak`, label soak, not part of `make test`): CADRE_SOAK_FAULTS
// faults (default 100) drawn at random (CADRE_SOAK_SEED, printed) from five kinds, each against
// its own three-host job (network namespaces, one worker a host, NO_SHARD or CADRE_SOAK_STRATEGY,
// 6 micro-batches a step) under `cadre run --recovery memory`, rendezvous in a 3-member etcd on the switch:
//   worker_kill  SIGKILL one host's worker: its agent starts another, which takes the live state;
//   agent_kill   SIGKILL one host's agent (its workers go with it): the others go on with 2 ranks,
//                then the agent is started again and the host joins back;
//   node_cut     one host's link goes down (packets vanish): the others go on with 2 ranks; its
//                agent gives up on etcd, the link heals, the agent is started again and joins;
//   hang         SIGSTOP one host's worker: that host's agent replaces it (--stall-action restart);
//   etcd_kill    SIGKILL one etcd member (the leader half the time): training must not stop.
// Every job must finish (every agent exit 0) with every loss equal, bit for bit, to a fault-free
// run that changed world size at the same steps (a chain of fault-free runs stopped with
// train.stop_at and resumed from that checkpoint at the next size). CADRE_SOAK_KINDS (a comma
// list) draws from some kinds only. Per fault it measures
// detection (fault -> first agent line that acts on it), time to training again (fault -> first
// step of the re-formed group, or the first step after an etcd kill) and steps lost; it prints a
// table per kind and writes soak.json and soak.md to CADRE_SOAK_OUT (default: the test's build
// directory; `make soak` runs this binary itself, as ctest would stop it after 1500 s, and plots
// soak.json with tests/soak/plot_soak.py). A fault that goes wrong
// keeps its job's logs under CADRE_SOAK_OUT/failed-<i>/ and the soak goes on; the test fails at
// the end unless every fault was survived with correct losses. Needs root.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "launch/launch_harness.h"
#include "netfault/metrics_watch.h"
#include "netfault/training_run.h"
#include "netfault/virtual_hosts.h"
#include "support/etcd_cluster.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

using cadre::netfault::Clock;
using cadre::netfault::Losses;
using cadre::netfault::losses_of;
using cadre::netfault::MetricsWatch;
using cadre::netfault::TrainShape;
using cadre::netfault::VirtualHosts;
using launch_test::Proc;
using launch_test::read_file;

namespace {

constexpr int kHosts = 3;
constexpr int kGlobalMicroBatches = 6;  // 2 a rank on 3 ranks, 3 on 2
constexpr int kSteps = 600;             // long enough for a lost host to come back while the others train
constexpr int kCommTimeoutS = 5;        // a cut host's peers leave their collective after this
constexpr int kHeartbeatS = 3, kStoreS = 5;
constexpr double kStallTimeoutS = 3;
const std::vector<std::string> kKinds = {"worker_kill", "agent_kill", "node_cut", "hang", "etcd_kill"};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CADRE_SOAK_STRATEGY (default NO_SHARD; FULL_SHARD: sharded state, copied to a peer's memory every
// CADRE_SOAK_MEMORY_INTERVAL steps, default 10, so a fault may cost up to that many steps).
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
TrainShape shape_for(int world) {
  static const std::string strategy = env_or("CADRE_SOAK_STRATEGY", "NO_SHARD");
  static const int memory_interval = std::stoi(env_or("CADRE_SOAK_MEMORY_INTERVAL", "10"));
  return TrainShape{strategy, kGlobalMicroBatches / world, 0, strategy == "NO_SHARD" ? 0 : memory_interval};
}

// One fault and what came of it.
struct Outcome {
  int index = 0;
  std::string kind;
  int host = -1;             // the victim host, or the etcd member for etcd_kill
  int64_t fault_step = 0;    // last step logged before the fault
  double detect_s = -1;      // -1: nothing to detect (etcd_kill)
  double resume_s = -1;
  int64_t steps_lost = 0;
  bool survived = false;     // every agent finished with exit 0
  bool losses_exact = false;
  std::string note;          // what went wrong
  nlohmann::json to_json() const {
    return {{"index", index}, {"kind", kind}, {"host", host}, {"fault_step", fault_step}, {"detect_s", detect_s},
            {"resume_s", resume_s}, {"steps_lost", steps_lost}, {"survived", survived},
            {"losses_exact", losses_exact}, {"note", note}};
  }
};

// "recovery: W rank(s) go on from step S in memory (round R, ...": every (S, W) in the text, in
// round order (the order they happened in).
std::vector<std::pair<int64_t, int>> recoveries_in(const std::string& text) {
  static const std::regex line(R"(recovery: (\d+) rank\(s\) go on from step (\d+) in memory \(round (\d+))");
  std::map<int64_t, std::pair<int64_t, int>> by_round;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
    by_round[std::stoll((*it)[3])] = {std::stoll((*it)[2]), std::stoi((*it)[1])};
  std::vector<std::pair<int64_t, int>> out;
  for (const auto& [round, recovery] : by_round) out.push_back(recovery);
  return out;
}

// The world size changes the logged losses went through: a group that went back to an older step
// (sharded state, copies every few steps) redid the steps after it, so a recovery undoes every
// earlier one at or after its step.
std::vector<std::pair<int64_t, int>> effective_switches(const std::vector<std::pair<int64_t, int>>& recoveries) {
  std::vector<std::pair<int64_t, int>> out;
  for (const auto& r : recoveries) {
    while (!out.empty() && out.back().first >= r.first) out.pop_back();
    out.push_back(r);
  }
  return out;
}

class RecoverySoak : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(VirtualHosts::have_privileges()) << "the soak needs root (network namespaces)";
    hosts_ = std::make_unique<VirtualHosts>(kHosts);
    data_dir_ = cadre::test::prepare_tiny_dataset(shared_.path(), 8, 30000);
    out_dir_ = getenv("CADRE_SOAK_OUT") ? getenv("CADRE_SOAK_OUT") : std::filesystem::current_path().string();
    std::filesystem::create_directories(out_dir_);
  }

  // --- one job ---------------------------------------------------------------------------

  struct Job {
    std::string dir, run_dir, rdzv_id;  // one rendezvous id a job: etcd outlives jobs
    std::map<int, std::unique_ptr<Proc>> agents;
    std::vector<std::unique_ptr<Proc>> gone;  // agents replaced by a restart, kept for their logs
    std::unique_ptr<MetricsWatch> watch;
    std::string all_output() const {
      std::string out;
      for (const auto& p : gone) out += p->output();
      for (const auto& [h, p] : agents) out += p->output();
      return out;
    }
  };

  void start_agent(Job& job, int host, const std::string& tag) {
    const std::string name = "h" + std::to_string(host) + tag;
    std::vector<std::string> argv = {
        CADRE_BIN, "run", "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend", "etcd",
        "--rdzv-endpoint", etcd_->endpoints(), "--rdzv-id", job.rdzv_id, "--max-restarts", "5",
        "--monitor-interval", "0.05", "--stop-timeout", "3", "--recovery", "memory",
        "--stall-timeout", std::to_string(kStallTimeoutS), "--stall-action", "restart", "--rdzv-conf",
        "last_call_timeout=2,heartbeat_timeout=" + std::to_string(kHeartbeatS) +
            ",join_timeout=90,store_timeout=" + std::to_string(kStoreS) + ",exit_linger=2",
        "--log-dir", job.dir + "/logs-" + name, "--"};
    auto train = cadre::netfault::train_args(CADRE_BIN, CADRE_SOURCE_DIR, data_dir_, job.run_dir, kSteps,
                                             kCommTimeoutS, shape_for(kHosts));
    argv.insert(argv.end(), train.begin(), train.end());
    if (job.agents.count(host)) job.gone.push_back(std::move(job.agents[host]));
    job.agents[host] = std::make_unique<Proc>(hosts_->command(host, argv, {"OMP_NUM_THREADS=1", "CADRE_JOB_SECRET=soak-job-secret-0123456789abcdef"}),
                                              job.dir + "/agent-" + name + ".out");
  }

  int worker_pid(const Job& job, int host) const {
    auto cmdline = [](int pid) { return read_file("/proc/" + std::to_string(pid) + "/cmdline"); };
    const std::string agent = cmdline(job.agents.at(host)->pid());
    for (int pid : hosts_->pids(host))
      if (pid != job.agents.at(host)->pid() && cmdline(pid) != agent && cmdline(pid).find("train") != std::string::npos)
        return pid;
    return -1;
  }

  // Every record logged so far, in file order, with the time the watcher saw it.
  static std::vector<cadre::netfault::StepRecord> records(const Job& job) {
    std::vector<cadre::netfault::StepRecord> out;
    for (const auto& s : job.watch->segments()) out.insert(out.end(), s.steps.begin(), s.steps.end());
    return out;
  }
  static int64_t last_step(const Job& job) {
    auto r = records(job);
    return r.empty() ? 0 : r.back().step;
  }

  bool wait_for(Job& job, const std::function<bool()>& cond, double timeout_s) {
    return launch_test::wait_until([&] {
      job.watch->poll();
      return cond();
    }, timeout_s);
  }

  // The first line any agent printed after `offsets` that acts on a fault.
  static bool detected(const Job& job, const std::map<int, size_t>& offsets) {
    static const std::vector<std::string> marks = {" ended: ", "re-forming the group", ") failed with ",
                                                   "replacing this node's workers"};
    for (const auto& [h, offset] : offsets) {
      const std::string out = job.agents.at(h)->output();
      if (out.size() <= offset) continue;
      const std::string fresh = out.substr(offset);
      for (const auto& m : marks)
        if (fresh.find(m) != std::string::npos) return true;
    }
    return false;
  }

  // --- the fault-free reference ------------------------------------------------------------

  // Losses of fault-free runs chained through checkpoints: 3 ranks from step 0, then at each
  // (step, world) switch, a run of that world size resumed from the previous run's checkpoint
  // of that step (train.stop_at wrote it). One run directory: each resume cuts metrics.jsonl
  // back to its checkpoint's step and appends. A switch at step 0 (sharded state lost before its
  // first copies after the start) is the first run's size.
  Losses chain_reference(const std::vector<std::pair<int64_t, int>>& switches) {
    std::vector<std::pair<int64_t, int>> changes;  // only the ones that change the world size
    int world = kHosts;
    for (const auto& [step, w] : switches)
      if (w != world) changes.push_back({step, world = w});
    std::string key;
    for (const auto& [step, w] : changes) key += std::to_string(step) + "x" + std::to_string(w) + "-";
    auto cached = references_.find(key);
    if (cached != references_.end()) return cached->second;
    const std::string run_dir = shared_ / ("reference-" + key + std::to_string(references_.size()));
    world = kHosts;
    if (!changes.empty() && changes.front().first == 0) {
      world = changes.front().second;
      changes.erase(changes.begin());
    }
    for (size_t i = 0; i <= changes.size(); ++i) {
      const int64_t stop = i < changes.size() ? changes[i].first : 0;
      std::vector<std::string> argv = {CADRE_BIN, "run", "--nproc-per-node", std::to_string(world), "--log-dir",
                                       run_dir + "-logs-" + std::to_string(i), "--"};
      auto train = cadre::netfault::train_args(CADRE_BIN, CADRE_SOURCE_DIR, data_dir_, run_dir, kSteps,
                                               kCommTimeoutS, shape_for(world),
                                               {"train.stop_at=" + std::to_string(stop)});
      argv.insert(argv.end(), train.begin(), train.end());
      auto r = cadre::test::run_process(argv, {"OMP_NUM_THREADS=1"}, 600);
      if (r.exit_code != 0) throw std::runtime_error("reference run " + run_dir + " part " + std::to_string(i) +
                                                     " failed:\n" + r.output);
      if (i < changes.size()) world = changes[i].second;
    }
    return references_[key] = losses_of(run_dir + "/metrics.jsonl");
  }

  // --- one fault -----------------------------------------------------------------------------

  Outcome run_fault(int index, const std::string& kind, std::mt19937& rng) {
    Outcome o;
    o.index = index;
    o.kind = kind;
    Job job;
    job.dir = shared_ / ("job-" + std::to_string(index));
    job.run_dir = job.dir + "/run";
    job.rdzv_id = "soak-" + std::to_string(index);
    std::filesystem::create_directories(job.dir);
    job.watch = std::make_unique<MetricsWatch>(job.run_dir + "/metrics.jsonl");
    try {
      inject_and_follow(job, o, rng);
    } catch (const std::exception& e) {
      o.note = e.what();
    }
    for (int h = 0; h < kHosts; ++h) {
      hosts_->kill_all(h);  // whatever a failed fault left running
      if (o.kind == "node_cut") hosts_->heal(h);
    }
    if (!(o.survived && o.losses_exact)) keep_logs(job, o);
    std::filesystem::remove_all(job.dir);
    return o;
  }

  void inject_and_follow(Job& job, Outcome& o, std::mt19937& rng) {
    etcd_up();
    for (int h = 0; h < kHosts; ++h) start_agent(job, h, "");
    const int64_t fault_at = std::uniform_int_distribution<int64_t>(5, 15)(rng);
    if (!wait_for(job, [&] { return last_step(job) >= fault_at; }, 180)) throw std::runtime_error("never reached step " + std::to_string(fault_at));
    o.host = std::uniform_int_distribution<int>(0, kHosts - 1)(rng);
    std::map<int, size_t> offsets;
    for (const auto& [h, p] : job.agents) offsets[h] = p->output().size();
    const size_t records_before = records(job).size();
    o.fault_step = last_step(job);
    const auto t_fault = Clock::now();
    inject(job, o, rng);

    // Detection and the re-formed group's first step.
    std::optional<Clock::time_point> t_detect, t_resume;
    auto watch_events = [&] {
      if (!t_detect && o.kind != "etcd_kill" && detected(job, offsets)) t_detect = Clock::now();
      if (!t_resume) {
        const auto rec = records(job);
        const auto recoveries = recoveries_in(job.all_output());
        for (size_t i = records_before; i < rec.size(); ++i) {
          const bool after_recovery = o.kind == "etcd_kill" ||
                                      (!recoveries.empty() && rec[i].step > recoveries.front().first);
          if (after_recovery && rec[i].seen > t_fault) {
            t_resume = rec[i].seen;
            break;
          }
        }
      }
      return t_resume.has_value();
    };
    if (!wait_for(job, watch_events, 120)) throw std::runtime_error("training did not go on after the fault");
    o.resume_s = seconds(*t_resume - t_fault);
    if (t_detect) o.detect_s = seconds(*t_detect - t_fault);
    if (o.kind == "agent_kill" || o.kind == "node_cut") bring_host_back(job, o);
    for (auto& [h, p] : job.agents)
      if (!p->wait_exit(300)) throw std::runtime_error("host " + std::to_string(h) + "'s agent did not finish");
    job.watch->poll();
    o.survived = true;
    for (auto& [h, p] : job.agents)
      if (p->exit_code() != 0) {
        o.survived = false;
        o.note = "host " + std::to_string(h) + "'s agent exited " + std::to_string(p->exit_code());
      }
    check_losses(job, o);
  }

  void inject(Job& job, Outcome& o, std::mt19937& rng) {
    if (o.kind == "worker_kill" || o.kind == "hang") {
      const int pid = worker_pid(job, o.host);
      if (pid <= 0) throw std::runtime_error("no worker on host " + std::to_string(o.host));
      ::kill(pid, o.kind == "hang" ? SIGSTOP : SIGKILL);
    } else if (o.kind == "agent_kill") {
      ::kill(job.agents.at(o.host)->pid(), SIGKILL);
    } else if (o.kind == "node_cut") {
      hosts_->cut(o.host);
    } else {  // etcd_kill: the leader half the time, else a follower
      const int leader = etcd_->leader();
      int member = leader;
      if (leader < 0 || std::uniform_int_distribution<int>(0, 1)(rng) == 1)
        member = (std::max(leader, 0) + 1 + std::uniform_int_distribution<int>(0, 1)(rng)) % etcd_->size();
      o.host = member;
      etcd_->kill(member);
      etcd_killed_ = true;
    }
  }

  // agent_kill / node_cut: once the two others trained a few steps on their own, the host's agent
  // is started again (after the link heals and the cut agent gave up) and joins.
  void bring_host_back(Job& job, Outcome& o) {
    auto two_rank_steps = [&] {
      const auto rec = recoveries_in(job.all_output());
      for (const auto& [step, world] : rec)
        if (world == kHosts - 1) return last_step(job) >= step + 3;
      return false;
    };
    if (!wait_for(job, two_rank_steps, 120)) throw std::runtime_error("the two others did not train on");
    if (o.kind == "node_cut") {
      if (!job.agents.at(o.host)->wait_exit(kStoreS + 30))
        throw std::runtime_error("the cut host's agent did not give up");
      hosts_->heal(o.host);
    } else {
      job.agents.at(o.host)->wait_exit(10);
    }
    if (!wait_for(job, [&] { return hosts_->pids(o.host).empty(); }, 10))
      throw std::runtime_error("processes left on host " + std::to_string(o.host));
    job.gone.push_back(std::move(job.agents[o.host]));
    job.agents.erase(o.host);
    start_agent(job, o.host, "-back");
  }

  void check_losses(Job& job, Outcome& o) {
    const auto switches = recoveries_in(job.all_output());
    if (switches.empty() && o.kind != "etcd_kill") o.note += " no recovery line;";
    if (!switches.empty()) o.steps_lost = std::max<int64_t>(0, o.fault_step - switches.front().first);
    const Losses logged = losses_of(job.run_dir + "/metrics.jsonl");
    const Losses expected = chain_reference(effective_switches(switches));
    o.losses_exact = logged.size() == size_t(kSteps);
    if (!o.losses_exact) o.note += " " + std::to_string(logged.size()) + " steps logged;";
    for (const auto& [step, loss] : logged)
      if (!expected.count(step) || expected.at(step) != loss) {
        o.losses_exact = false;
        o.note += " step " + std::to_string(step) + " differs from the fault-free chain;";
        break;
      }
  }

  void keep_logs(const Job& job, const Outcome& o) {
    const std::string to = out_dir_ + "/failed-" + std::to_string(o.index);
    std::error_code ec;
    std::filesystem::remove_all(to, ec);
    std::filesystem::copy(job.dir, to, std::filesystem::copy_options::recursive, ec);
    std::printf("[soak] fault %d (%s) went wrong: %s; logs kept in %s\n", o.index, o.kind.c_str(), o.note.c_str(),
                to.c_str());
  }

  // A 3-member etcd on the switch, started afresh after a member was killed.
  void etcd_up() {
    if (etcd_ && !etcd_killed_) return;
    etcd_.reset();
    cadre::test::EtcdClusterOptions options;
    options.members = 3;
    options.hosts = {hosts_->switch_address(), hosts_->switch_address(), hosts_->switch_address()};
    hosts_->run_on_switch([&] { etcd_ = std::make_unique<cadre::test::EtcdCluster>(options); });
    etcd_killed_ = false;
  }

  void write_results(unsigned seed, const std::vector<Outcome>& outcomes) const;

  cadre::test::TempDir shared_{"soak"};
  std::string data_dir_, out_dir_;
  std::unique_ptr<VirtualHosts> hosts_;
  std::unique_ptr<cadre::test::EtcdCluster> etcd_;
  bool etcd_killed_ = false;
  std::map<std::string, Losses> references_;
};

// --- the report ----------------------------------------------------------------------------

double percentile_of(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1) + 0.5)];
}

std::string table(const std::vector<Outcome>& outcomes) {
  std::string md = "| fault | count | survived, losses exact | detection median / worst (s) | training again median / "
                   "worst (s) | steps lost median / worst |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& kind : kKinds) {
    std::vector<double> detect, resume, lost;
    int n = 0, ok = 0;
    for (const auto& o : outcomes) {
      if (o.kind != kind) continue;
      ++n;
      ok += o.survived && o.losses_exact;
      if (o.detect_s >= 0) detect.push_back(o.detect_s);
      if (o.resume_s >= 0) resume.push_back(o.resume_s);
      lost.push_back(double(o.steps_lost));
    }
    char row[400];
    auto pair = [](const std::vector<double>& v, const char* fmt) {
      if (v.empty()) return std::string("-");
      char b[64];
      std::snprintf(b, sizeof b, fmt, percentile_of(v, 0.5), percentile_of(v, 1.0));
      return std::string(b);
    };
    std::snprintf(row, sizeof row, "| %s | %d | %d | %s | %s | %s |\n", kind.c_str(), n, ok,
                  pair(detect, "%.2f / %.2f").c_str(), pair(resume, "%.2f / %.2f").c_str(),
                  pair(lost, "%.0f / %.0f").c_str());
    md += row;
  }
  return md;
}

void RecoverySoak::write_results(unsigned seed, const std::vector<Outcome>& outcomes) const {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& o : outcomes) all.push_back(o.to_json());
  const TrainShape shape = shape_for(kHosts);
  const nlohmann::json results = {
      {"seed", seed}, {"strategy", shape.strategy}, {"memory_interval", shape.memory_interval}, {"faults", all}};
  cadre::test::write_text(out_dir_ + "/soak.json.tmp", results.dump(1) + "\n");
  std::filesystem::rename(out_dir_ + "/soak.json.tmp", out_dir_ + "/soak.json");
  cadre::test::write_text(out_dir_ + "/soak.md", table(outcomes));
}

TEST_F(RecoverySoak, RandomFaultsAreSurvivedWithExactLosses) {
  const int faults = getenv("CADRE_SOAK_FAULTS") ? std::atoi(getenv("CADRE_SOAK_FAULTS")) : 100;
  const unsigned seed = getenv("CADRE_SOAK_SEED") ? unsigned(std::atoll(getenv("CADRE_SOAK_SEED")))
                                                  : unsigned(std::random_device{}());
  ASSERT_GT(faults, 0);
  std::vector<std::string> kinds;
  std::stringstream wanted(getenv("CADRE_SOAK_KINDS") ? getenv("CADRE_SOAK_KINDS") : "");
  for (std::string k; std::getline(wanted, k, ',');) {
    ASSERT_NE(std::find(kKinds.begin(), kKinds.end(), k), kKinds.end()) << "CADRE_SOAK_KINDS: no fault kind '" << k << "'";
    kinds.push_back(k);
  }
  if (kinds.empty()) kinds = kKinds;
  const TrainShape shape = shape_for(kHosts);
  std::printf("[soak] %d faults, seed %u (CADRE_SOAK_SEED=%u repeats the draw); %s%s\n", faults, seed, seed,
              shape.strategy.c_str(),
              shape.memory_interval > 0 ? (", copies every " + std::to_string(shape.memory_interval) + " steps").c_str()
                                        : "");
  std::mt19937 rng(seed);
  std::vector<Outcome> outcomes;
  const auto t0 = Clock::now();
  for (int i = 0; i < faults; ++i) {
    const std::string kind = kinds[std::uniform_int_distribution<size_t>(0, kinds.size() - 1)(rng)];
    outcomes.push_back(run_fault(i, kind, rng));
    const Outcome& o = outcomes.back();
    const double elapsed = seconds(Clock::now() - t0), rate = (i + 1) / elapsed;
    std::printf("[soak] %d/%d %s on %d after step %lld: detected %.2f s, training again %.2f s, steps lost %lld, %s "
                "(%.1f faults/min, ETA %.0f min)\n",
                i + 1, faults, o.kind.c_str(), o.host, static_cast<long long>(o.fault_step), o.detect_s, o.resume_s,
                static_cast<long long>(o.steps_lost),
                o.survived && o.losses_exact ? "losses exact" : ("FAILED:" + o.note).c_str(), rate * 60,
                (faults - i - 1) / rate / 60);
    std::fflush(stdout);
    write_results(seed, outcomes);  // after every fault: an interrupted soak keeps what it measured
  }
  const std::string md = table(outcomes);
  std::printf("[soak] %d faults in %.1f min (seed %u); %s/soak.json\n%s", faults, seconds(Clock::now() - t0) / 60,
              seed, out_dir_.c_str(), md.c_str());
  for (const auto& o : outcomes)
    EXPECT_TRUE(o.survived && o.losses_exact) << "fault " << o.index << " (" << o.kind << "): " << o.note;
}

}  // namespace
