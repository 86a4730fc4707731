// Models made in shards (shard/deferred_param.h), checked end to end:
// - the initial weights are the same bits at every layout (1, 2 and 3 FULL_SHARD ranks,
//   SHARD_GRAD_OP, HYBRID_SHARD 2 x 2, NO_SHARD, ZeRO-1, tp 2, dp 2 x tp 2) as
//   Llama::init_weights on the whole model;
// - from a Hugging Face folder (written by transformers, bf16, two files), each rank's shard
//   holds exactly the folder's values at any layout (and of its import, a Cadre checkpoint,
//   read as the shards are made), training's first losses equal those after `cadre ckpt
//   import` + train.init_from, and the ranks together read each tensor byte once;
// - no rank ever holds the whole model: ranks in memory cgroups limited below the model's
//   float32 size load it from the folder, from its import (a Cadre checkpoint) and from
//   scratch (train.steps 0); unlimited, each rank's peak RSS stays within its shard plus the
//   largest unit above its baseline, and the bytes it read (/proc/self/io) are its share (of
//   the checkpoint, give or take a checksum block where its part ends inside a tensor).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_folder.h"
#include "core/config.h"
#include "models/llama/config.h"
#include "models/llama/model.h"
#include "models/registry.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"

namespace fs = std::filesystem;

namespace {

// The embedding and the first block: frozen parameters in the root's unit and in a block's.
const char* kFreeze = "^(tok_embeddings|layers\\.0\\.)";

const char* kTinyModel =
    "model:\n  arch: llama\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  vocab_size: 512\n"
    "  multiple_of: 32\n  max_seq_len: 64\n  tie_embeddings: false\n"
    "data:\n  batch_size: 4\noptim:\n  lr: 0.001\n  warmup_steps: 0\n"
    "train:\n  steps: 3\n  threads: 1\n  eval_interval: 0\n  seed: 1234\n";

int64_t get_i64(std::ifstream& in) {
  int64_t v = 0;
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  return v;
}
std::vector<int64_t> get_shape(std::ifstream& in) {
  std::vector<int64_t> s(static_cast<size_t>(get_i64(in)));
  for (auto& d : s) d = get_i64(in);
  return s;
}

// The whole model put together from every rank's pieces (init_worker.cpp's files). Elements
// two ranks both hold (replicas) must agree; every element must be held by some rank.
std::map<std::string, at::Tensor> assemble(const std::string& prefix, int world) {
  struct Part {
    at::Tensor values, held;
    std::vector<int64_t> offsets, global;
  };
  std::map<std::pair<std::string, std::vector<int64_t>>, Part> parts;
  for (int r = 0; r < world; ++r) {
    std::ifstream in(prefix + ".rank" + std::to_string(r), std::ios::binary);
    EXPECT_TRUE(in) << prefix << ".rank" << r;
    while (in.peek() != EOF) {
      std::string name(static_cast<size_t>(get_i64(in)), '\0');
      in.read(name.data(), static_cast<std::streamsize>(name.size()));
      const auto global = get_shape(in), offsets = get_shape(in), local = get_shape(in);
      const int64_t start = get_i64(in), numel = get_i64(in);
      at::Tensor v = at::empty({numel}, at::kFloat);
      in.read(static_cast<char*>(v.data_ptr()), numel * 4);
      Part& p = parts[{name, offsets}];
      if (!p.values.defined()) p = {at::zeros(local, at::kFloat), at::zeros(local, at::kBool), offsets, global};
      at::Tensor dst = p.values.view({-1}).narrow(0, start, numel), held = p.held.view({-1}).narrow(0, start, numel);
      EXPECT_TRUE(at::equal(dst.masked_select(held), v.masked_select(held))) << name << ": replicas differ";
      dst.copy_(v);
      held.fill_(true);
    }
  }
  std::map<std::string, at::Tensor> whole;
  for (auto& [key, p] : parts) {
    EXPECT_TRUE(p.held.all().item<bool>()) << key.first << ": elements no rank holds";
    at::Tensor& w = whole[key.first];
    if (!w.defined()) w = at::full(p.global, std::nanf(""), at::kFloat);
    at::Tensor box = w;
    for (size_t d = 0; d < p.offsets.size(); ++d) box = box.narrow(int64_t(d), p.offsets[d], p.values.size(int64_t(d)));
    box.copy_(p.values);
  }
  return whole;
}

class DeferredInit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<cadre::test::TempDir>("deferred-init");
    cadre::test::write_text(path("tiny.yaml"), kTinyModel);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_->path()) / name).string(); }

  // The model init_worker's ranks made at this layout, put together.
  std::map<std::string, at::Tensor> made(const std::string& tag, int world, std::vector<std::string> sets) {
    std::vector<std::string> argv = {INIT_WORKER, path("tiny.yaml"), path(tag), "run.dir=" + path(tag + "-run")};
    argv.insert(argv.end(), sets.begin(), sets.end());
    auto results = cadre::testing::run_ranks(world, argv);
    for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << tag << "\n" << cadre::testing::describe(results);
    return assemble(path(tag), world);
  }

  void write_hf_folder(const std::string& out, const std::vector<std::string>& shape_args) {
    std::vector<std::string> argv = {CADRE_VENV_PYTHON, std::string(CADRE_SOURCE_DIR) + "/tests/python/hf_random_folder.py", out};
    argv.insert(argv.end(), shape_args.begin(), shape_args.end());
    auto r = cadre::test::run_process(argv, {}, 600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  std::unique_ptr<cadre::test::TempDir> dir_;
};

TEST_F(DeferredInit, InitialWeightsAreTheSameBitsAtEveryLayout) {
  cadre::Config config = cadre::config_load(path("tiny.yaml"), {});
  cadre::model_config_resolve(config);
  cadre::Llama whole(cadre::llama_config(config.model));
  whole.init_weights(1234);
  const std::vector<std::pair<std::string, std::pair<int, std::vector<std::string>>>> layouts = {
      {"one", {1, {}}},
      {"full2", {2, {"parallel.strategy=FULL_SHARD"}}},
      {"full3", {3, {"parallel.strategy=FULL_SHARD"}}},
      {"gradop2", {2, {"parallel.strategy=SHARD_GRAD_OP"}}},
      {"hybrid4", {4, {"parallel.strategy=HYBRID_SHARD", "parallel.shard_group_size=2"}}},
      {"noshard2", {2, {"parallel.strategy=NO_SHARD"}}},
      {"zero1_2", {2, {"parallel.strategy=ZERO1"}}},
      {"tp2", {2, {"parallel.tp_size=2"}}},
      {"dp2tp2", {4, {"parallel.tp_size=2", "parallel.strategy=FULL_SHARD"}}},
      {"frozen2", {2, {"parallel.strategy=FULL_SHARD", std::string("train.freeze=") + kFreeze}}},
      {"frozen_tp2", {2, {"parallel.tp_size=2", std::string("train.freeze=") + kFreeze}}},
  };
  for (const auto& [tag, layout] : layouts) {
    auto model = made(tag, layout.first, layout.second);
    for (const auto& p : whole.named_parameters()) {
      ASSERT_TRUE(model.count(p.key())) << tag << ": no " << p.key();
      EXPECT_TRUE(at::equal(model[p.key()], p.value())) << tag << ": " << p.key() << " differs from the whole model's";
    }
    EXPECT_EQ(model.size(), whole.named_parameters().size()) << tag;
  }
  // Not all one value: the norms start at one, the matrices are N(0, init_std) draws.
  EXPECT_NEAR(whole.layers->blocks[0]->attention->wq->weight.std().item<double>(), 0.02, 0.002);
}

TEST_F(DeferredInit, HfFolderShardsHoldItsValuesAndTrainLikeItsImport) {
  const std::string hf = path("hf");
  write_hf_folder(hf, {"64", "2", "4", "2", "192", "512", "60KB"});
  ASSERT_TRUE(fs::exists(hf + "/model.safetensors.index.json")) << "the folder should be split into files";
  // Every layout's shards hold the folder's values, widened from bf16.
  cadre::HfFolder folder(hf);
  cadre::Config config = cadre::config_load(path("tiny.yaml"), {"model.ffn_dim=192", "train.init_from=" + hf});
  auto adapter = cadre::model_state_dict_adapter(config);
  for (const auto& [tag, layout] : std::vector<std::pair<std::string, std::pair<int, std::vector<std::string>>>>{
           {"hf_full3", {3, {}}},
           {"hf_tp2", {2, {"parallel.tp_size=2"}}},
           {"hf_frozen2", {2, {std::string("train.freeze=") + kFreeze}}}}) {
    std::vector<std::string> sets = {"train.init_from=" + hf, "model.ffn_dim=192"};
    sets.insert(sets.end(), layout.second.begin(), layout.second.end());
    auto model = made(tag, layout.first, sets);
    ASSERT_EQ(model.size(), 3u + 2u * 9u) << tag;  // embedding, head, final norm; 9 per block
    for (const auto& [name, got] : model) {
      const cadre::HfTensor& t = folder.tensors().at(adapter->external_name(name));
      at::Tensor want = at::empty(t.shape, at::kFloat);
      folder.read_float32(t, want.data_ptr<float>());
      EXPECT_TRUE(at::equal(got, want)) << tag << ": " << name;
    }
  }
  // Its import (a Cadre checkpoint) read into the shards as they are made: the same values.
  const std::string ck = path("imported");
  auto imp = cadre::test::run_process({CADRE_BIN, "ckpt", "import", "--from", "hf", hf, "--out", ck}, {}, 300);
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  {
    auto model = made("ck_full3", 3, {"train.init_from=" + ck, "model.ffn_dim=192"});
    ASSERT_EQ(model.size(), 3u + 2u * 9u);
    for (const auto& [name, got] : model) {
      const cadre::HfTensor& t = folder.tensors().at(adapter->external_name(name));
      at::Tensor want = at::empty(t.shape, at::kFloat);
      folder.read_float32(t, want.data_ptr<float>());
      EXPECT_TRUE(at::equal(got, want)) << "from the import: " << name;
    }
  }
  // Training from the folder and from its import: the same losses, bit for bit.
  const std::string data = cadre::test::prepare_tiny_dataset(path("data-root"), 4, 20000);
  std::map<std::string, std::vector<double>> losses;
  for (const std::string& from : {hf, ck}) {
    const std::string run = path(from == hf ? "from-hf" : "from-import");
    auto results = cadre::testing::run_ranks(2, {CADRE_BIN, "train", "--config", path("tiny.yaml"), "--set",
                                                 "data.dir=" + data, "--set", "run.dir=" + run, "--set",
                                                 "train.init_from=" + from, "--set", "parallel.strategy=FULL_SHARD"});
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
    std::ifstream metrics(run + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) losses[from].push_back(nlohmann::json::parse(line)["loss"]);
    if (from != hf) continue;
    // Each tensor's bytes were read once, split between the two ranks (each its half, give or
    // take the padding that evens a unit out).
    const std::regex read_line(R"(init_from: rank (\d) read (\d+) of (\d+) bytes)");
    double sum = 0, total = 0;
    for (const auto& r : results) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(r.output, m, read_line)) << r.output;
      sum += std::stod(m[2]);
      total = std::stod(m[3]);
      EXPECT_LE(std::stod(m[2]), total / 2 + 64) << m.str();
    }
    EXPECT_EQ(sum, total);
  }
  ASSERT_EQ(losses[hf].size(), 3u);
  EXPECT_EQ(losses[hf], losses[ck]);
}

// train.freeze: two FULL_SHARD ranks train with the embedding and the first block frozen (and
// activation checkpointing), checkpoint, and one rank resumes that checkpoint for another step. The frozen parameters
// (sharded, no optimizer state) still hold their initial bits in both checkpoints; every other
// parameter trained.
TEST_F(DeferredInit, FrozenParametersKeepTheirInitialValuesThroughTrainingAndResume) {
  cadre::Config config = cadre::config_load(path("tiny.yaml"), {});
  cadre::model_config_resolve(config);
  cadre::Llama whole(cadre::llama_config(config.model));
  whole.init_weights(1234);
  const std::string data = cadre::test::prepare_tiny_dataset(path("data-root"), 4, 20000);
  const std::string run = path("frozen-run"), freeze = std::string("train.freeze=") + kFreeze;
  // The first run checkpoints its activations too: behind the frozen embedding and block 0, the
  // second block's input needs no gradient, its parameters do.
  auto train = [&](int ranks, const std::string& steps) {
    auto results = cadre::testing::run_ranks(
        ranks, {CADRE_BIN, "train", "--config", path("tiny.yaml"), "--set", "data.dir=" + data, "--set",
                "run.dir=" + run, "--set", freeze, "--set", "train.steps=" + steps, "--set",
                "parallel.strategy=FULL_SHARD", "--set",
                std::string("parallel.activation_checkpointing=") + (ranks == 2 ? "true" : "false")});
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
    EXPECT_NE(results[0].output.find("train.freeze: "), std::string::npos) << results[0].output;
  };
  for (const auto& [ranks, steps] : std::vector<std::pair<int, std::string>>{{2, "3"}, {1, "4"}}) {
    train(ranks, steps);
    if (HasFatalFailure()) return;
    const std::string tag = "step " + steps;
    const cadre::CheckpointReader saved(run + "/checkpoints/step-" + std::string(8 - steps.size(), '0') + steps);
    const std::regex frozen(kFreeze);
    int64_t kept = 0, trained = 0;
    for (const auto& p : whole.named_parameters()) {
      const bool same = at::equal(saved.read_tensor("model." + p.key()), p.value());
      if (std::regex_search(p.key(), frozen)) {
        EXPECT_TRUE(same) << tag << ": frozen " << p.key() << " changed";
        EXPECT_FALSE(saved.has("optim.exp_avg." + p.key())) << tag << ": optimizer state for frozen " << p.key();
        kept += same;
      } else {
        EXPECT_FALSE(same) << tag << ": " << p.key() << " did not train";
        trained += !same;
      }
    }
    EXPECT_EQ(kept, 1 + 9) << "the embedding and the first block's 9 parameters";
    EXPECT_GT(trained, 0);
  }
  std::ifstream metrics(run + "/metrics.jsonl");
  int64_t rows = 0;
  for (std::string line; std::getline(metrics, line);) rows += !line.empty();
  EXPECT_EQ(rows, 4) << "three steps, then one more after the resume";
}

// A memory cgroup (v1) of its own for each rank, limited to `limit` bytes, removed with the test.
class RankCgroups {
 public:
  RankCgroups(const std::string& tag, int ranks, int64_t limit) {
    for (int r = 0; r < ranks; ++r) {
      dirs_.push_back("/sys/fs/cgroup/memory/cadre-" + tag + "-" + std::to_string(::getpid()) + "-rank" + std::to_string(r));
      fs::create_directory(dirs_.back());
      std::ofstream(dirs_.back() + "/memory.limit_in_bytes") << limit;
      std::ifstream in(dirs_.back() + "/memory.limit_in_bytes");
      int64_t set = 0;
      in >> set;
      EXPECT_GE(set, limit - 4096) << dirs_.back();
      EXPECT_LE(set, limit) << dirs_.back();
    }
  }
  ~RankCgroups() {
    for (const auto& d : dirs_) ::rmdir(d.c_str());
  }
  // The command prefix that puts rank r's process in its cgroup, then execs the command.
  std::vector<std::string> prefix(int r) const {
    return {"sh", "-c", "echo $$ > " + dirs_[size_t(r)] + "/cgroup.procs && exec \"$0\" \"$@\""};
  }
  int64_t failcnt(int r) const {
    std::ifstream in(dirs_[size_t(r)] + "/memory.failcnt");
    int64_t n = -1;
    in >> n;
    return n;
  }

 private:
  std::vector<std::string> dirs_;
};

double mib_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1]);
}

// About 190M parameters: 730 MiB in float32, 365 MiB as the folder's bfloat16.
const char* kLargeModel =
    "model:\n  arch: llama\n  dim: 1024\n  n_layers: 8\n  n_heads: 16\n  n_kv_heads: 8\n  ffn_dim: 4096\n"
    "  vocab_size: 32000\n  max_seq_len: 128\n  tie_embeddings: false\n"
    "train:\n  steps: 0\n  threads: 1\nparallel:\n  strategy: FULL_SHARD\n";

// A load-only run's ranks (train.steps 0, no memory limit): peak memory above the baseline, and
// bytes read beyond half the checkpoint (the reader's count and /proc/self/io's rchar).
void check_unlimited(const std::vector<cadre::testing::RankResult>& results, int64_t float32_bytes,
                     double read_beyond_half) {
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
    const double params = mib_after(r.output, R"(holds ([0-9.e+]+) MiB of parameters)");
    const double unit = mib_after(r.output, R"(a gather makes ([0-9.e+]+) MiB whole)");
    const double peak = mib_after(r.output, R"(peak RSS ([0-9.e+]+) MiB)");
    const double baseline = mib_after(r.output, R"(MiB \(([0-9.e+]+) MiB before the model\))");
    ASSERT_GT(params, 0) << r.output;
    EXPECT_NEAR(params, float32_bytes / 2.0 / (1 << 20), 1.0) << "a float32 half of the model";
    EXPECT_LE(peak - baseline, 1.1 * (params + unit) + 32) << r.output;
    // The estimate printed before loading is what loading held above the baseline, within 15%.
    const double estimate = mib_after(r.output, R"(estimate_bytes=(\d+))") / (1 << 20);
    EXPECT_GT(estimate, 0.85 * (peak - baseline)) << r.output;
    EXPECT_LT(estimate, 1.15 * (peak - baseline)) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(init_from: rank \d read (\d+) of (\d+) bytes)"))) << r.output;
    const double read = std::stod(m[1]), total = std::stod(m[2]);
    EXPECT_LE(read, total / 2 + read_beyond_half) << "its half of the tensors";
    const double rchar = mib_after(r.output, R"(; (\d+) bytes read in all)");
    std::cout << "[read] " << m.str() << ": beyond half " << read - total / 2 << " bytes; rchar " << rchar
              << "; peak above baseline " << peak - baseline << " MiB of shard " << params << " MiB" << std::endl;
    EXPECT_GE(rchar, read) << r.output;
    EXPECT_LE(rchar, read + double(16 << 20)) << r.output;
  }
}

TEST_F(DeferredInit, NoRankEverHoldsTheWholeModel) {
  const std::string hf = path("hf-large");
  write_hf_folder(hf, {"1024", "8", "16", "8", "4096", "32000", "150MB"});
  cadre::test::write_text(path("large.yaml"), kLargeModel);
  cadre::Config config = cadre::config_load(path("large.yaml"), {});
  cadre::model_config_resolve(config);
  const int64_t float32_bytes = cadre::llama_param_count(cadre::llama_config(config.model)) * 4;
  ASSERT_GT(float32_bytes, int64_t{700} << 20);
  auto train = [&](const std::string& tag, const std::vector<std::string>& sets, const cadre::testing::RankOptions& o) {
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config", path("large.yaml"), "--set", "run.dir=" + path(tag)};
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    return cadre::testing::run_ranks(2, argv, o);
  };

  // Each rank limited to 85% of the model's float32 size: it cannot hold the whole model, and
  // it needs no more than its half, the largest unit and the process itself.
  const int64_t limit = float32_bytes * 85 / 100;
  for (const std::string from : {"hf", "scratch"}) {
    RankCgroups cgroups(from, 2, limit);
    cadre::testing::RankOptions o;
    o.prefix = [&](int r) { return cgroups.prefix(r); };
    auto results = train("limited-" + from, from == "hf" ? std::vector<std::string>{"train.init_from=" + hf}
                                                         : std::vector<std::string>{}, o);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(results[size_t(r)].exit_code, 0) << from << ", limit " << limit << " bytes\n"
                                                 << cadre::testing::describe(results);
      EXPECT_NE(results[size_t(r)].output.find("load: rank"), std::string::npos) << results[size_t(r)].output;
    }
  }

  // The control: one rank, which would hold the whole model, does not fit the same limit. It
  // finds the limit in its cgroup and stops before allocating the model, with exit code 2 and
  // the breakdown, rather than being killed by the kernel part way in.
  {
    RankCgroups cgroups("one", 1, limit);
    cadre::testing::RankOptions o;
    o.prefix = [&](int r) { return cgroups.prefix(r); };
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config", path("large.yaml"), "--set",
                                     "run.dir=" + path("limited-one"), "--set", "train.init_from=" + hf};
    auto one = cadre::testing::run_ranks(1, argv, o);
    EXPECT_EQ(one[0].exit_code, 2) << one[0].output;
    EXPECT_NE(one[0].output.find("would not fit its memory"), std::string::npos) << one[0].output;
    EXPECT_NE(one[0].output.find("memory.limit_in_bytes) must hold 1 rank"), std::string::npos) << one[0].output;
    EXPECT_EQ(one[0].output.find("load: rank"), std::string::npos) << "it stopped before loading";
    EXPECT_EQ(cgroups.failcnt(0), 0) << "it never reached the limit";
  }
  // Ranks of one job in one cgroup count together: each half fits the limit, both do not.
  {
    RankCgroups shared("shared", 1, limit);
    cadre::testing::RankOptions o;
    o.prefix = [&](int) { return shared.prefix(0); };
    auto both = train("limited-shared", {"train.init_from=" + hf}, o);
    for (const auto& r : both) {
      EXPECT_EQ(r.exit_code, 2) << cadre::testing::describe(both);
      EXPECT_NE(r.output.find("would not fit its memory"), std::string::npos) << r.output;
    }
    EXPECT_NE(both[0].output.find("must hold 2 ranks of this job"), std::string::npos) << both[0].output;
  }

  // Without a limit: the peak above the process's own baseline is its shard and the largest
  // unit (plus reading buffers and allocator slack: 10% and 32 MiB), and the bytes the process
  // read (rchar: every read(2) and pread(2)) are the bytes the reader reports, plus the
  // headers, manifest, config files and /proc it reads (under 16 MiB). Of the folder each rank
  // reads exactly its half; of a Cadre checkpoint (the folder imported: each tensor one piece,
  // checked in blocks of 4 MiB) its half and at most one block where its part of a unit's
  // tensors ends inside a tensor (9 units).
  check_unlimited(train("unlimited", {"train.init_from=" + hf}, {}), float32_bytes, 64 * 1024);
  const std::string imported = path("imported-large");
  auto imp = cadre::test::run_process({CADRE_BIN, "ckpt", "import", "--from", "hf", hf, "--out", imported}, {}, 300);
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  {
    RankCgroups cgroups("imported", 2, limit);
    cadre::testing::RankOptions o;
    o.prefix = [&](int r) { return cgroups.prefix(r); };
    auto results = train("limited-imported", {"train.init_from=" + imported}, o);
    for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  }
  check_unlimited(train("unlimited-imported", {"train.init_from=" + imported}, {}), float32_bytes,
                  9 * cadre::CheckpointManifest::kChecksumBlockBytes + 64 * 1024);
}

}  // namespace
