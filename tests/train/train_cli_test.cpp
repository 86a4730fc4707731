// `cadre train` end to end, as a user runs it: bad input exits 2 naming the key or file before
// any work; a tiny model learns; runs are deterministic; gradient accumulation matches a
// larger batch; bf16 mixed precision trains; the checkpoint loads in Python.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/tiny_dataset.h"
#include "support/process.h"

using cadre::test::run_process;
using cadre::test::RunResult;

namespace {

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("train-cli");
    cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
  }
  static void TearDownTestSuite() { delete dir_; }

  // Runs cadre train on configs/tiny.yaml with the test data and extra overrides.
  static RunResult train(const std::string& run, std::vector<std::string> sets, const std::string& config = "") {
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config",
                                     config.empty() ? CADRE_SOURCE_DIR "/configs/tiny.yaml" : config,
                                     "--set", "data.dir=" + (*dir_ / "data"), "--set", "run.dir=" + (*dir_ / run)};
    for (auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return run_process(argv, {}, 300);
  }

  static std::vector<nlohmann::json> metrics(const std::string& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* TrainCli::dir_ = nullptr;

void expect_config_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "message should name '" << needle << "':\n" << r.output;
}

}  // namespace

TEST_F(TrainCli, BadInputExitsTwoNamingTheProblem) {
  expect_config_error(train("bad1", {"model.dimm=3"}), "model.dimm");
  expect_config_error(train("bad2", {"train.steps=ten"}), "train.steps");
  expect_config_error(train("bad3", {"data.dir=" + (*dir_ / "nowhere")}), "nowhere");
  expect_config_error(train("bad4", {"model.vocab_size=100"}), "model.vocab_size");
  expect_config_error(train("bad5", {"model.max_seq_len=32"}), "model.max_seq_len");
  expect_config_error(train("bad6", {}, *dir_ / "missing.yaml"), "missing.yaml");
  cadre::test::write_text(*dir_ / "broken.yaml", "model: [unclosed\n");
  expect_config_error(train("bad7", {}, *dir_ / "broken.yaml"), "broken.yaml");
  expect_config_error(train("bad8", {"parallel.strategy=ZERO"}), "parallel.strategy");
  RunResult flags = run_process({CADRE_BIN, "train", "--confg", "x.yaml"});
  expect_config_error(flags, "--confg");
  // Nothing was started for any of them.
  for (int i = 1; i <= 8; ++i) EXPECT_FALSE(std::filesystem::exists(*dir_ / ("bad" + std::to_string(i) + "/metrics.jsonl")));
}

TEST_F(TrainCli, TinyModelLearnsAndWritesTheRunDirectory) {
  RunResult r = train("learn", {"train.steps=60", "train.eval_interval=20"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto m = metrics("learn");
  ASSERT_EQ(m.size(), 60u);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "rss_bytes"})
    EXPECT_TRUE(m[0].contains(key)) << key;
  double first = m[0]["loss"], last = m.back()["loss"];
  EXPECT_NEAR(first, std::log(512.0), 0.5);  // starts near uniform over the vocabulary
  EXPECT_LT(last, first - 2.0) << "loss should fall well below its start";
  EXPECT_TRUE(m[19].contains("val_loss"));
  EXPECT_LT(m.back()["val_loss"].get<double>(), m[19]["val_loss"].get<double>());
  for (const char* f : {"config.yaml", "summary.json", "checkpoints/step-00000060/COMMITTED"})
    EXPECT_TRUE(std::filesystem::exists(*dir_ / (std::string("learn/") + f))) << f;
  // The resolved config is itself a valid config.
  RunResult again = train("learn-again", {"train.steps=1"}, *dir_ / "learn/config.yaml");
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

TEST_F(TrainCli, SameSeedSameLossesBitForBit) {
  ASSERT_EQ(train("det1", {"train.steps=8"}).exit_code, 0);
  ASSERT_EQ(train("det2", {"train.steps=8"}).exit_code, 0);
  ASSERT_EQ(train("det3", {"train.steps=8", "train.seed=7"}).exit_code, 0);
  auto a = metrics("det1"), b = metrics("det2"), c = metrics("det3");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << i;
  EXPECT_NE(a.back()["loss"].get<double>(), c.back()["loss"].get<double>());
}

TEST_F(TrainCli, GradientAccumulationMatchesOneLargerBatch) {
  // 2 micro-batches of 4 consume the same 8 samples as one batch of 8: same mean loss, same
  // update, up to float32 rounding of the split sums.
  ASSERT_EQ(train("accum", {"train.steps=10", "optim.grad_accum_steps=2", "data.batch_size=4"}).exit_code, 0);
  ASSERT_EQ(train("big", {"train.steps=10", "optim.grad_accum_steps=1", "data.batch_size=8"}).exit_code, 0);
  auto a = metrics("accum"), b = metrics("big");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * lb) << "step " << i + 1;
  }
}

TEST_F(TrainCli, Bfloat16MixedPrecisionTracksFloat32) {
  ASSERT_EQ(train("bf16", {"train.steps=30", "parallel.mixed_precision.param_dtype=bfloat16"}).exit_code, 0);
  ASSERT_EQ(train("fp32", {"train.steps=30"}).exit_code, 0);
  auto a = metrics("bf16"), b = metrics("fp32");
  // bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%); over 30 steps the
  // trajectories drift apart but stay within a few percent of each other.
  EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>() - 1.0);
  EXPECT_NEAR(a.back()["loss"].get<double>(), b.back()["loss"].get<double>(), 0.05 * b.back()["loss"].get<double>());
}

TEST_F(TrainCli, CheckpointExportsToAFileTorchLoadReads) {
  ASSERT_EQ(train("ckpt", {"train.steps=3"}).exit_code, 0);
  RunResult e = run_process({CADRE_BIN, "ckpt", "export", *dir_ / "ckpt", "--format", "pt", "--out", *dir_ / "ckpt.pt"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::string script =
      "import sys, torch\n"
      "d = torch.load(sys.argv[1])  # weights_only by default from torch 2.6\n"
      "w = d['model.embed_tokens.weight']\n"
      "assert w.shape == (512, 64) and w.dtype == torch.float32, w.shape\n"
      "assert 'model.layers.1.mlp.down_proj.weight' in d\n"
      "print('ok', torch.__version__, len(d))\n";
  cadre::test::write_text(*dir_ / "check.py", script);
  // PyTorch 2.x (the project venv: torch.load's weights_only default since 2.6 refuses any
  // global but tensors and plain containers) and Debian's PyTorch 1.13 (the oldest reader kept).
  for (const std::string& python : {std::string(CADRE_VENV_PYTHON), std::string("/usr/bin/python3")}) {
    RunResult r = run_process({python, *dir_ / "check.py", *dir_ / "ckpt.pt"});
    EXPECT_EQ(r.exit_code, 0) << python << ": " << r.output;
    EXPECT_NE(r.output.find("ok"), std::string::npos) << python << ": " << r.output;
  }
}
