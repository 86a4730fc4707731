// Resume and reshard with real training processes: 20 steps + resume + 20 equals 40 straight
// (bit for bit at the same world size), a checkpoint of 2 FULL_SHARD ranks continues on 1, 3
// and 4 ranks under other strategies (each rank reading only its part), checkpoints reshard
// across both mesh dimensions (dp 2 x tp 2 to 1 rank and to 4 FULL_SHARD ranks, FULL_SHARD to
// tp 2), a version-1 checkpoint (ranges of flattened tensors) still loads, SIGTERM checkpoints
// the step it arrives at, a rank whose training fails during a save ends within the comm timeout,
// and damaged or foreign checkpoints are skipped or refused without harm, including a full disk.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "support/comm_timeout.h"
#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"

namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exit_code = 0;  // the first non-zero exit code of any rank
  std::string output;
};

class Resume : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("resume");
    cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
  }
  static void TearDownTestSuite() { delete dir_; }

  // `cadre train` of the tiny model for 40 steps, checkpointing every 10, as `world` ranks.
  static Outcome train(const std::string& run, int world, std::vector<std::string> sets) {
    std::vector<std::string> argv = train_argv(run, sets);
    Outcome out;
    if (world == 1) {
      auto r = cadre::test::run_process(argv, {}, 300);
      return {r.exit_code, r.output};
    }
    auto results = cadre::testing::run_ranks(world, argv);
    for (const auto& r : results)
      if (r.exit_code != 0 && out.exit_code == 0) out.exit_code = r.exit_code;
    out.output = cadre::testing::describe(results);
    return out;
  }

  static std::string path(const std::string& run) { return *dir_ / run; }

  static std::vector<std::string> train_argv(const std::string& run, const std::vector<std::string>& sets) {
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                     "--set", "data.dir=" + (*dir_ / "data"), "--set", "run.dir=" + path(run),
                                     "--set", "train.steps=40", "--set", "checkpoint.interval=10",
                                     "--set", "train.threads=1", "--set", "train.eval_interval=0"};
    // "key=value" items become --set overrides; a "--flag" passes through with the item after it.
    for (size_t i = 0; i < sets.size(); ++i) {
      if (sets[i].rfind("--", 0) == 0 && i + 1 < sets.size()) {
        argv.push_back(sets[i]);
        argv.push_back(sets[++i]);
      } else {
        argv.push_back("--set");
        argv.push_back(sets[i]);
      }
    }
    return argv;
  }

  // step -> loss from a run's metrics.jsonl.
  static std::map<int64_t, double> losses(const std::string& run) {
    std::map<int64_t, double> out;
    std::ifstream in(path(run) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto r = nlohmann::json::parse(line);
      EXPECT_EQ(out.count(r["step"].get<int64_t>()), 0u) << "step logged twice in " << run;
      out[r["step"].get<int64_t>()] = r["loss"].get<double>();
    }
    return out;
  }

  // A straight 40-step run, computed once per configuration and shared by the tests.
  static const std::map<int64_t, double>& straight(const std::string& name, int world, const std::vector<std::string>& sets) {
    static std::map<std::string, std::map<int64_t, double>> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
    Outcome r = train(name, world, sets);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return cache[name] = losses(name);
  }

  // The bound for runs that should follow the straight 2-rank run `name` of `sets` (kTwoRanks
  // and the optimizer's): its order spread (support/order_spread.h) from one rank reading the
  // same 12-sample global batches whole and as 2 micro-batches of 6 (the same function, other
  // float32 sums). Sums over ranks change order with the layout, so a resumed or resharded run
  // follows the straight one to rounding as the trajectory amplifies it (measured up to 2e-7).
  static cadre::test::OrderSpread order_spread(const std::string& name, const std::vector<std::string>& sets) {
    std::vector<std::string> whole = sets, split = sets;
    whole.push_back("data.batch_size=12");
    split.insert(split.end(), {"data.batch_size=6", "optim.grad_accum_steps=2"});
    return cadre::test::OrderSpread(steps(straight(name, 2, sets)),
                                    {steps(straight(name + "-one-rank", 1, whole)),
                                     steps(straight(name + "-one-rank-2-micro-batches", 1, split))});
  }

  // Per-step losses in step order.
  static std::vector<double> steps(const std::map<int64_t, double>& by_step) {
    std::vector<double> out;
    for (const auto& [step, loss] : by_step) out.push_back(loss);
    return out;
  }

  // `cadre train` as two ranks on loopback, started and left running; rank r logs to
  // <run>-rank<r>.log.
  static void start_two_ranks(const std::string& run, const std::vector<std::string>& sets,
                              cadre::testing::ChildGuard& ranks) {
    const int port = cadre::testing::free_port();
    for (int r = 0; r < 2; ++r) {
      const auto env = cadre::testing::rank_environment(r, 2, port, "resume-test-secret-" + std::to_string(port));
      ranks.pids.push_back(cadre::testing::spawn(train_argv(run, sets), cadre::testing::base_environment(env),
                                                 path(run + "-rank" + std::to_string(r) + ".log")));
    }
  }

  // Steps in `run`'s metrics.jsonl: complete lines only (the writer may be mid-line).
  static long steps_logged(const std::string& run) {
    std::ifstream in(path(run) + "/metrics.jsonl");
    return static_cast<long>(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  }

  // Polls until `run` logged `steps` steps; false after two minutes.
  static bool wait_for_steps(const std::string& run, long steps) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (steps_logged(run) < steps) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the condition
    }
    return true;
  }

  static std::string log_of(const std::string& run, int rank) {
    std::ifstream in(path(run + "-rank" + std::to_string(rank) + ".log"));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  static cadre::test::RunResult cadre_cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {CADRE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return cadre::test::run_process(argv, {}, 120);
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* Resume::dir_ = nullptr;

const std::vector<std::string> kTwoRanks = {"parallel.strategy=FULL_SHARD", "data.batch_size=6"};

void flip_byte(const std::string& file, int64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(offset);
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(offset);
  f.write(&c, 1);
}

}  // namespace

TEST_F(Resume, TwentyStepsThenResumeEqualsFortyStraightBitForBit) {
  for (int world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<std::string> sets = world == 1 ? std::vector<std::string>{"data.batch_size=12"} : kTwoRanks;
    const auto& whole = straight("straight" + std::to_string(world), world, sets);
    const std::string run = "split" + std::to_string(world);
    auto first = sets;
    first.push_back("train.stop_at=20");
    if (world == 1) first.push_back("checkpoint.async=false");  // the synchronous path writes the same
    Outcome a = train(run, world, first);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_TRUE(fs::exists(path(run) + "/checkpoints/step-00000020/COMMITTED"));
    auto second = sets;
    second.push_back("--resume");
    second.push_back("auto");
    Outcome b = train(run, world, second);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("resumed from " + path(run) + "/checkpoints/step-00000020 at step 20"), std::string::npos)
        << b.output;
    auto resumed = losses(run);
    ASSERT_EQ(resumed.size(), 40u);
    ASSERT_EQ(whole.size(), 40u);
    for (int64_t step = 1; step <= 40; ++step) EXPECT_EQ(resumed.at(step), whole.at(step)) << "step " << step;
  }
}

namespace {

// The step-20 checkpoint of a 2-rank FULL_SHARD run (the first 20 steps of "straight2"),
// trained once and shared.
std::string full_shard_source(Resume* test) {
  static std::string checkpoint;
  if (!checkpoint.empty()) return checkpoint;
  auto first = kTwoRanks;
  first.push_back("train.stop_at=20");
  Outcome a = test->train("source", 2, first);
  EXPECT_EQ(a.exit_code, 0) << a.output;
  checkpoint = test->path("source") + "/checkpoints/step-00000020";
  return checkpoint;
}

// How much of the checkpoint each rank read ("resume: rank R read B of T bytes"): the largest
// share, and how many ranks reported.
std::pair<double, int> largest_read_share(const std::string& output) {
  std::regex read_line(R"(resume: rank (\d+) read (\d+) of (\d+) bytes)");
  double largest = 0;
  int ranks = 0;
  for (std::sregex_iterator it(output.begin(), output.end(), read_line), end; it != end; ++it) {
    ++ranks;
    largest = std::max(largest, std::stod((*it)[2]) / std::stod((*it)[3]));
  }
  return {largest, ranks};
}

struct Target {
  int world;
  std::vector<std::string> sets;
};

// Continues the step-20 `checkpoint` under each target layout (run "<prefix><world>") and
// checks steps 21..40 against the straight run within its order spread (Resume::order_spread).
// No rank gathers the checkpoint: on 4 ranks each reads under 75% of it. Returns each run's output.
std::vector<std::string> continue_on(Resume* test, const std::string& checkpoint, const std::string& prefix,
                                     const std::vector<Target>& targets, const cadre::test::OrderSpread& whole) {
  std::vector<std::string> outputs;
  for (const Target& t : targets) {
    SCOPED_TRACE(t.sets[0] + " on " + std::to_string(t.world) + " ranks");
    const std::string run = prefix + std::to_string(t.world);
    auto sets = t.sets;
    sets.push_back("--resume");
    sets.push_back(checkpoint);
    Outcome r = test->train(run, t.world, sets);
    outputs.push_back(r.output);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto resumed = test->losses(run);
    EXPECT_EQ(resumed.size(), 20u);
    if (!resumed.empty()) {
      EXPECT_EQ(resumed.begin()->first, 21) << run;
    }
    whole.expect_follows(Resume::steps(resumed), "[resume] " + run, 20);
    auto [share, ranks_seen] = largest_read_share(r.output);
    if (t.world == 4) {
      EXPECT_LT(share, 0.75) << r.output;
    }
    EXPECT_EQ(ranks_seen, t.world) << r.output;
  }
  return outputs;
}

}  // namespace

TEST_F(Resume, TwoRankFullShardCheckpointContinuesOnOneThreeAndFourRanks) {
  const cadre::test::OrderSpread whole = order_spread("straight2", kTwoRanks);
  const std::string checkpoint = full_shard_source(this);
  // The global batch stays 12 samples; only its split over ranks and the strategy change.
  continue_on(this, checkpoint, "reshard",
              {{1, {"parallel.strategy=NO_SHARD", "data.batch_size=12"}},
               {3, {"parallel.strategy=SHARD_GRAD_OP", "data.batch_size=4"}},
               {4, {"parallel.strategy=HYBRID_SHARD", "parallel.shard_group_size=2", "data.batch_size=3"}}},
              whole);
}

// SGD's momentum buffers are checkpointed as optim.momentum_buffer.<param>, sharded like the
// parameters: a 2-rank FULL_SHARD checkpoint at step 20 continues on 1 NO_SHARD rank and on 3
// ZERO1 ranks as the straight 40-step run does (within its order spread), and a run configured for AdamW
// is refused that checkpoint, naming the optimizer it was written with.
TEST_F(Resume, SgdCheckpointContinuesOnOneAndThreeRanksAndRefusesAdamW) {
  const std::vector<std::string> sgd = {"optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true",
                                        "optim.lr=0.05"};
  auto two = sgd;
  two.insert(two.end(), kTwoRanks.begin(), kTwoRanks.end());
  const cadre::test::OrderSpread whole = order_spread("sgd-straight2", two);
  ASSERT_EQ(whole.reference().size(), 40u);
  auto first = two;
  first.push_back("train.stop_at=20");
  Outcome a = train("sgd-source", 2, first);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string checkpoint = path("sgd-source") + "/checkpoints/step-00000020";
  std::ifstream in(checkpoint + "/manifest.json");
  const std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(manifest.find("\"optim.momentum_buffer.layers.0.attention.wq.weight\""), std::string::npos);
  EXPECT_EQ(manifest.find("optim.exp_avg"), std::string::npos);

  auto on = [&](std::vector<std::string> layout) {
    layout.insert(layout.begin(), sgd.begin(), sgd.end());
    return layout;
  };
  continue_on(this, checkpoint, "sgd-reshard",
              {{1, on({"parallel.strategy=NO_SHARD", "data.batch_size=12"})},
               {3, on({"parallel.strategy=ZERO1", "data.batch_size=4"})}},
              whole);

  Outcome adamw = train("sgd-as-adamw", 1, {"data.batch_size=12", "--resume", checkpoint});
  EXPECT_EQ(adamw.exit_code, 2) << adamw.output;
  EXPECT_NE(adamw.output.find("holds optimizer state momentum_buffer (it was written with optim.name sgd"),
            std::string::npos)
      << adamw.output;
}

// dp 2 x tp 2 with 6 samples per data-parallel rank reads the same 12-sample global batches
// as 2 FULL_SHARD ranks ("straight2"): its steps, and those of every layout continuing from
// its checkpoint, follow that run to float32 rounding (sums change order: within its order
// spread, measured ~1e-7).
const std::vector<std::string> kMesh2x2 = {"parallel.strategy=FULL_SHARD", "parallel.tp_size=2", "data.batch_size=6"};

TEST_F(Resume, DataTensorParallelCheckpointContinuesOnOneRankAndOnFourFullShardRanks) {
  const cadre::test::OrderSpread whole = order_spread("straight2", kTwoRanks);
  auto first = kMesh2x2;
  first.push_back("train.stop_at=20");
  Outcome a = train("mesh-source", 4, first);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(losses("mesh-source").size(), 20u);
  whole.expect_follows(steps(losses("mesh-source")), "[resume] mesh-source");
  const std::string checkpoint = path("mesh-source") + "/checkpoints/step-00000020";
  // A row-parallel weight is stored as boxes of its global [64, 64] shape, each inside one
  // tensor-parallel rank's 32 columns (FSDP may cut a rank's part into rows and part-rows).
  std::ifstream manifest_file(checkpoint + "/manifest.json");
  const auto manifest = nlohmann::json::parse(manifest_file);
  const auto& wo = manifest["tensors"]["model.layers.0.attention.wo.weight"];
  EXPECT_EQ(wo["shape"], nlohmann::json::array({64, 64}));
  std::set<int64_t> column_blocks;
  for (const auto& piece : wo["pieces"]) {
    const int64_t col = piece["offsets"][1].get<int64_t>(), width = piece["sizes"][1].get<int64_t>();
    EXPECT_TRUE(col + width <= 32 || col >= 32) << piece.dump();
    column_blocks.insert(col / 32);
  }
  EXPECT_EQ(column_blocks.size(), 2u) << wo.dump();

  continue_on(this, checkpoint, "mesh-reshard",
              {{1, {"parallel.strategy=NO_SHARD", "data.batch_size=12"}},
               {4, {"parallel.strategy=FULL_SHARD", "data.batch_size=3"}}},
              whole);
}

TEST_F(Resume, FullShardCheckpointContinuesOnTensorParallel) {
  const cadre::test::OrderSpread whole = order_spread("straight2", kTwoRanks);
  // 2 ranks as tp 2 (one data-parallel rank with the whole 12-sample batch).
  auto outputs = continue_on(this, full_shard_source(this), "tp-from-full-shard",
                             {{2, {"parallel.tp_size=2", "data.batch_size=12"}}}, whole);
  // A piece is read whole (for its checksum) and FULL_SHARD stored most parameters whole in
  // one rank's shard, so each tensor-parallel rank, needing half of every parameter, reads
  // nearly every piece, but never one twice.
  EXPECT_LE(largest_read_share(outputs[0]).first, 1.0) << outputs[0];
}

// Checkpoints written before boxes (manifest version 1: each piece a range of the flattened
// tensor, COMMITTED holding only the step) load as they are. A one-rank checkpoint stores each
// tensor as one piece, which is the same bytes under either version: rewriting its manifest as
// version 1 makes the old format exactly, and the resumed run must match bit for bit.
TEST_F(Resume, VersionOneCheckpointsStillLoad) {
  const auto& whole = straight("straight1", 1, {"data.batch_size=12"});
  ASSERT_EQ(train("v1-source", 1, {"data.batch_size=12", "train.stop_at=20"}).exit_code, 0);
  const std::string old = path("v1-old/step-00000020");
  fs::create_directories(path("v1-old"));
  fs::copy(path("v1-source") + "/checkpoints/step-00000020", old);
  std::ifstream in(old + "/manifest.json");
  auto m = nlohmann::json::parse(in);
  m["version"] = 1;
  for (auto& [name, t] : m["tensors"].items()) {
    ASSERT_EQ(t["pieces"].size(), 1u) << name;
    auto& piece = t["pieces"][0];
    ASSERT_EQ(piece["sizes"], t["shape"]) << name << ": one rank writes whole tensors";
    int64_t numel = 1;
    for (const auto& d : t["shape"]) numel *= d.get<int64_t>();
    piece = {{"file", piece["file"]}, {"offset", piece["offset"]}, {"start", 0}, {"count", numel}, {"crc32c", piece["crc32c"]}};
  }
  std::ofstream(old + "/manifest.json") << m.dump(1) << "\n";
  std::ofstream(old + "/COMMITTED") << "20\n";
  auto inspect = cadre_cli({"ckpt", "verify", old});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  Outcome r = train("v1-resumed", 1, {"data.batch_size=12", "--resume", old});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto resumed = losses("v1-resumed");
  ASSERT_EQ(resumed.size(), 20u);
  for (const auto& [step, loss] : resumed) EXPECT_EQ(loss, whole.at(step)) << "step " << step;
}

// A stop signal (preemption, an agent stopping its workers) lands mid-run: every rank
// finishes the same step, checkpoints it and exits 143; the resumed run loses no step.
TEST_F(Resume, SigtermCheckpointsTheCurrentStepAndResumeLosesNothing) {
  const auto& whole = straight("straight2", 2, kTwoRanks);
  const std::string run = "sigterm";
  cadre::testing::ChildGuard ranks;
  start_two_ranks(run, kTwoRanks, ranks);
  // Once step 3 is logged, freeze both ranks, signal both, and let them go: the signal is
  // handled before either runs another step, so the run cannot finish first.
  ASSERT_TRUE(wait_for_steps(run, 3)) << "no third step logged in " << path(run);
  for (pid_t p : ranks.pids) kill(p, SIGSTOP);
  for (pid_t p : ranks.pids) kill(p, SIGTERM);
  for (pid_t p : ranks.pids) kill(p, SIGCONT);
  for (pid_t& p : ranks.pids) {
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    p = 0;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 143) << "status " << status;
  }
  const std::string out0 = log_of(run, 0);
  auto before = losses(run);
  const int64_t stopped = before.rbegin()->first;
  ASSERT_GE(stopped, 3);
  ASSERT_LT(stopped, 40) << out0;
  EXPECT_NE(out0.find("stopped after step " + std::to_string(stopped) + " on signal 15"), std::string::npos) << out0;
  const std::string checkpoint = path(run) + "/checkpoints/" + (stopped < 10 ? "step-0000000" : "step-000000") +
                                 std::to_string(stopped);
  ASSERT_TRUE(fs::exists(checkpoint + "/COMMITTED")) << out0;

  auto resume = kTwoRanks;
  resume.push_back("--resume");
  resume.push_back("auto");
  Outcome r = train(run, 2, resume);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at step " + std::to_string(stopped) + " "), std::string::npos) << r.output;
  auto after = losses(run);
  ASSERT_EQ(after.size(), 40u);
  for (int64_t step = 1; step <= 40; ++step) EXPECT_EQ(after.at(step), whole.at(step)) << "step " << step;
}

// A rank's training fails (a peer went silent) while its background save waits for that peer
// to agree the save was written: the rank ends within parallel.comm_timeout, saying why, instead
// of waiting out the saver's own timeout (checkpoint.timeout_s, 10 minutes) before its error
// reaches the log. Rank 1's part of the step-20 save blocks (its file is a FIFO nobody reads,
// as on a hung filesystem), so rank 0's save is still agreeing when rank 1 is frozen.
TEST_F(Resume, ATrainingErrorDuringASaveEndsTheRankWithinTheCommTimeout) {
  const std::string run = "stuck-save";
  const int comm_timeout_s = 3;
  auto sets = kTwoRanks;
  sets.insert(sets.end(), {"checkpoint.interval=20", "parallel.comm_timeout=" + std::to_string(comm_timeout_s)});
  cadre::testing::ChildGuard ranks;
  start_two_ranks(run, sets, ranks);
  // The ranks clear incomplete checkpoints as they start: the FIFO goes in once they train,
  // while both are frozen well before step 20.
  ASSERT_TRUE(wait_for_steps(run, 1)) << log_of(run, 0);
  for (pid_t p : ranks.pids) kill(p, SIGSTOP);
  ASSERT_LT(steps_logged(run), 19) << "the ranks were frozen too late for this test";
  const std::string partial = path(run) + "/checkpoints/.step-00000020.partial";
  fs::create_directories(partial);
  ASSERT_EQ(mkfifo((partial + "/rank-00001-of-00002.bin").c_str(), 0644), 0) << std::strerror(errno);
  for (pid_t p : ranks.pids) kill(p, SIGCONT);

  // Step 21 logged: rank 0's step-20 save is past writing, waiting for rank 1's. Rank 1 goes
  // silent; rank 0 alone goes on into its next collective.
  ASSERT_TRUE(wait_for_steps(run, 21)) << log_of(run, 0);
  kill(ranks.pids[1], SIGSTOP);
  const auto t_silent = std::chrono::steady_clock::now();
  int status = 0;
  pid_t exited = 0;
  while ((exited = waitpid(ranks.pids[0], &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t_silent < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling for the exit
  ASSERT_EQ(exited, ranks.pids[0]) << "rank 0 still runs 60 s after its peer went silent:\n" << log_of(run, 0);
  ranks.pids[0] = 0;
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_silent).count();
  std::printf("[stuck-save] rank 0 exited %.1f s after rank 1 went silent (comm_timeout %d s)\n", took,
              comm_timeout_s);
  const std::string out0 = log_of(run, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "status " << status << "\n" << out0;
  EXPECT_TRUE(cadre::test::names_comm_timeout(out0, comm_timeout_s * 1000)) << out0;
  EXPECT_NE(out0.find("stops training while its step-20 save is in flight: abandoning that save"), std::string::npos) << out0;
  EXPECT_FALSE(fs::exists(path(run) + "/checkpoints/step-00000020")) << "an abandoned save was published";
  fs::remove(partial + "/rank-00001-of-00002.bin");
}

TEST_F(Resume, DamagedNewestCheckpointIsSkippedForTheOneBefore) {
  const auto& whole = straight("straight2", 2, kTwoRanks);
  for (const char* damage : {"flipped byte", "missing shard"}) {
    SCOPED_TRACE(damage);
    const std::string run = std::string("damaged-") + (damage[0] == 'f' ? "flip" : "missing");
    auto first = kTwoRanks;
    first.push_back("train.stop_at=20");
    ASSERT_EQ(train(run, 2, first).exit_code, 0);
    const std::string newest = path(run) + "/checkpoints/step-00000020";
    if (damage[0] == 'f') flip_byte(newest + "/rank-00001-of-00002.bin", 1000);
    else fs::remove(newest + "/rank-00001-of-00002.bin");

    auto verify = cadre_cli({"ckpt", "verify", path(run)});
    EXPECT_EQ(verify.exit_code, 1) << verify.output;
    EXPECT_NE(verify.output.find("DAMAGED  " + newest), std::string::npos) << verify.output;
    EXPECT_NE(verify.output.find("rank-00001-of-00002.bin"), std::string::npos) << verify.output;
    EXPECT_NE(verify.output.find("ok       " + path(run) + "/checkpoints/step-00000010"), std::string::npos) << verify.output;

    auto resume = kTwoRanks;
    resume.push_back("--resume");
    resume.push_back("auto");
    Outcome r = train(run, 2, resume);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("skipping damaged checkpoint " + newest), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("at step 10"), std::string::npos) << r.output;
    EXPECT_TRUE(fs::exists(newest + ".corrupt"));
    auto resumed = losses(run);
    ASSERT_EQ(resumed.size(), 40u);
    for (int64_t step = 11; step <= 40; ++step) EXPECT_EQ(resumed.at(step), whole.at(step)) << "step " << step;
  }
}

// One digit of a piece's start edited by hand (the last piece of a tensor moved down by one
// element): every CRC still passes, and a rank reading the whole tensor would count as many
// elements as it asked for. The manifest's checksum and coverage check catch it: verify names
// the manifest, and resume (here on 1 rank, which reads whole tensors) falls back to step 10.
TEST_F(Resume, AnEditedManifestIsSkippedInsteadOfLoadingShiftedWeights) {
  auto first = kTwoRanks;
  first.push_back("train.stop_at=20");
  ASSERT_EQ(train("edited", 2, first).exit_code, 0);
  const std::string newest = path("edited") + "/checkpoints/step-00000020";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(newest + "/manifest.json"));
  std::string edited;
  for (auto& [name, tensor] : manifest["tensors"].items()) {
    if (tensor["pieces"].size() < 2 || tensor["pieces"].back()["offsets"][0].get<int64_t>() == 0) continue;
    auto& last = tensor["pieces"].back();
    last["offsets"][0] = last["offsets"][0].get<int64_t>() - 1;  // one row (or element) earlier
    edited = name;
    break;
  }
  ASSERT_FALSE(edited.empty());
  std::ofstream(newest + "/manifest.json") << manifest.dump(1) << "\n";

  auto verify = cadre_cli({"ckpt", "verify", path("edited")});
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("DAMAGED  " + newest), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("manifest.json"), std::string::npos) << verify.output;

  Outcome r = train("edited", 1, {"data.batch_size=12", "--resume", "auto"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping damaged checkpoint " + newest), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at step 10"), std::string::npos) << r.output;
}

TEST_F(Resume, LeftoversOfACrashedSaveAreRemovedAndIgnored) {
  auto first = std::vector<std::string>{"data.batch_size=12", "train.stop_at=20"};
  ASSERT_EQ(train("crashed", 1, first).exit_code, 0);
  const std::string dir = path("crashed") + "/checkpoints";
  // What a crash leaves: a partial directory, and a renamed one whose marker never came.
  fs::copy(dir + "/step-00000020", dir + "/.step-00000030.partial");
  fs::copy(dir + "/step-00000020", dir + "/step-00000030");
  fs::remove(dir + "/step-00000030/COMMITTED");
  Outcome r = train("crashed", 1, {"data.batch_size=12", "--resume", "auto"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("removed incomplete checkpoint " + dir + "/step-00000030"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at step 20"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/.step-00000030.partial"));
}

// checkpoint.at_end false: a run of 25 steps saving every 10 keeps steps 10 and 20 and writes
// nothing at its end (with the default, step 25 too).
TEST_F(Resume, NoSaveAtTheEndWhenAtEndIsOff) {
  for (bool at_end : {false, true}) {
    const std::string run = at_end ? "at-end" : "no-end";
    Outcome r = train(run, 1, {"data.batch_size=12", "train.steps=25", std::string("checkpoint.at_end=") +
                                                                            (at_end ? "true" : "false")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> saved;
    for (const auto& e : fs::directory_iterator(path(run) + "/checkpoints")) saved.push_back(e.path().filename());
    std::sort(saved.begin(), saved.end());
    const std::vector<std::string> want = at_end ? std::vector<std::string>{"step-00000010", "step-00000020", "step-00000025"}
                                                 : std::vector<std::string>{"step-00000010", "step-00000020"};
    EXPECT_EQ(saved, want) << r.output;
  }
}

TEST_F(Resume, ForeignShapeAndUnrequestedResumeAreRefusedAndTouchNothing) {
  ASSERT_EQ(train("foreign", 1, {"data.batch_size=12", "train.stop_at=10"}).exit_code, 0);
  Outcome wide = train("foreign", 1, {"data.batch_size=12", "model.dim=128", "--resume", "auto"});
  EXPECT_EQ(wide.exit_code, 2) << wide.output;
  EXPECT_NE(wide.output.find("does not fit this model: tensor 'model.layers.0.attention.wk.weight' is float32 [32, 64] "
                             "there and float32 [64, 128] here"),
            std::string::npos)
      << wide.output;
  Outcome fresh = train("foreign", 1, {"data.batch_size=12", "--resume", "none"});
  EXPECT_EQ(fresh.exit_code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find("already holds checkpoints (newest step-00000010)"), std::string::npos) << fresh.output;
  auto verify = cadre_cli({"ckpt", "verify", path("foreign")});
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

// A full disk (a 3 MB tmpfs; one checkpoint of this model is 2 MB) fails the second save
// with the system's message, on every rank, and leaves the first one loadable.
TEST_F(Resume, AFullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  ASSERT_EQ(geteuid(), 0u) << "this test mounts a tmpfs and needs root (CI runs as root)";
  const std::string mnt = path("small-disk");
  fs::create_directories(mnt);
  ASSERT_EQ(mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=3m"), 0) << "mount tmpfs: " << std::strerror(errno);
  struct Unmount {
    std::string dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{mnt};
  Outcome r = train("full-disk", 2, {"parallel.strategy=FULL_SHARD", "data.batch_size=6", "checkpoint.dir=" + mnt});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint step 20 was not saved"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(mnt + "/step-00000010/COMMITTED"));
  EXPECT_FALSE(fs::exists(mnt + "/.step-00000020.partial"));
  auto verify = cadre_cli({"ckpt", "verify", mnt});
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("ok       " + mnt + "/step-00000010"), std::string::npos) << verify.output;
}

// An explicit resume of an older step while newer checkpoints exist is refused before any
// step runs: going on would mix two histories in one directory (and pruning would delete
// the new line's saves). Nothing is touched.
TEST_F(Resume, ExplicitResumeOfAnOlderStepBelowNewerCheckpointsIsRefused) {
  ASSERT_EQ(train("older", 1, {"data.batch_size=12", "train.stop_at=20"}).exit_code, 0);
  const std::string dir = path("older") + "/checkpoints";
  Outcome r = train("older", 1, {"data.batch_size=12", "--resume", dir + "/step-00000010"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds newer checkpoints (step-00000020)"), std::string::npos) << r.output;
  auto verify = cadre_cli({"ckpt", "verify", path("older")});
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("step-00000020"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("step-00000010"), std::string::npos) << verify.output;
  // The newest one resumes as usual.
  Outcome newest = train("older", 1, {"data.batch_size=12", "--resume", dir + "/step-00000020"});
  EXPECT_EQ(newest.exit_code, 0) << newest.output;
}
