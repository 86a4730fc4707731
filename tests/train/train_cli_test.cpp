// `cadre train` end to end, as a user runs it: bad input exits 2 naming the key or file before
// any work; a tiny model learns; runs are deterministic; gradient accumulation matches a
// larger batch; bf16 mixed precision trains; the checkpoint loads in Python; an output nobody
// reads does not kill it; fine-tuning refuses data prepared with another tokenizer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/file_util.h"
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

// Runs argv with SIGPIPE at its default disposition and stdout a pipe that has no reader from
// the start (a shell pipeline whose reader left), stderr into `err_path`; returns the wait
// status, or -1 if it ran past timeout_s (then it is killed).
int run_with_readerless_stdout(const std::vector<std::string>& argv, const std::string& err_path, double timeout_s) {
  std::vector<char*> args;  // built before the fork: the child only makes async-signal-safe calls
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return -1;
  close(fds[0]);  // no reader at all: every write to the pipe fails with EPIPE or raises SIGPIPE
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigprocmask(SIG_UNBLOCK, &pipe_only, nullptr);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (dup2(fds[1], STDOUT_FILENO) < 0 || err < 0 || dup2(err, STDERR_FILENO) < 0) _exit(127);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
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

// A write to a pipe or socket whose reader left fails with EPIPE; it never kills a rank. The
// recovery soak saw rank 0 die of SIGPIPE as its group re-formed after a peer's SIGKILL (a socket
// write on a thread that does not block the signal); `cadre train` ignores it for the whole
// process. Here the write is its own report on a stdout nobody reads: the run still finishes,
// exit 0, every step in metrics.jsonl.
TEST_F(TrainCli, AnOutputWhoseReaderLeftDoesNotKillTraining) {
  const std::vector<std::string> argv = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                         "--set", "data.dir=" + (*dir_ / "data"), "--set",
                                         "run.dir=" + (*dir_ / "readerless"), "--set", "train.steps=3"};
  const int status = run_with_readerless_stdout(argv, *dir_ / "readerless.err", 300);
  ASSERT_NE(status, -1) << "did not finish within 300 s";
  std::ifstream err_in(*dir_ / "readerless.err");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;
  EXPECT_EQ(metrics("readerless").size(), 3u);
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

// Fine-tuning's data must carry the model's own token ids: data prepared with a fresh
// tokenizer (whose vocabulary fits the model's, so nothing else would notice) is refused with
// exit 2 naming both files, from a checkpoint and from an exported folder; data prepared with
// the model's tokenizer (`--tokenizer`) trains, for a tokenizer.json folder too; one with no
// tokenizer warns and trains.
TEST_F(TrainCli, FineTuningRefusesDataPreparedWithAnotherTokenizer) {
  ASSERT_EQ(train("tok-base", {"train.steps=2"}).exit_code, 0);
  const std::string own = *dir_ / "data/tokenizer.model";
  auto prepare = [&](const std::string& name, int64_t vocab, const std::string& tokenizer) {
    cadre::PrepareOptions opt;
    opt.inputs = {*dir_ / "text"};
    opt.out = *dir_ / name;
    opt.vocab_size = vocab;
    opt.seq_len = 64;
    opt.tokenizer = tokenizer;
    cadre::dataset_prepare(opt);
    return opt.out;
  };
  const std::string fresh = prepare("data-fresh", 400, ""), same = prepare("data-same", 0, own);
  auto fine_tune = [&](const std::string& run, const std::string& from, const std::string& data) {
    return train(run, {"train.steps=1", "train.init_from=" + from, "data.dir=" + data});
  };
  const std::string base = *dir_ / "tok-base";
  RunResult r = fine_tune("ft-fresh", base, fresh);
  expect_config_error(r, "was prepared with another tokenizer");
  expect_config_error(r, fresh + "/tokenizer.model");
  expect_config_error(r, own);
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "ft-fresh/metrics.jsonl")) << "refused before any step";
  r = fine_tune("ft-same", base, same);
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // A manifest written before identities were kept: the data's tokenizer file decides.
  const std::string manifest_path = fresh + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(cadre::file_read(manifest_path));
  ASSERT_TRUE(manifest.contains("tokenizer_identity")) << manifest.dump();
  EXPECT_EQ(manifest["tokenizer_identity"].get<std::string>().rfind("sha256:", 0), 0u);
  manifest.erase("tokenizer_identity");
  cadre::test::write_text(manifest_path, manifest.dump());
  expect_config_error(fine_tune("ft-fresh-old", base, fresh), "was prepared with another tokenizer");

  const std::string folder = *dir_ / "tok-hf";
  RunResult e = run_process({CADRE_BIN, "ckpt", "export", base, "--format", "hf", "--out", folder});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  ASSERT_TRUE(std::filesystem::exists(folder + "/tokenizer.model")) << e.output;
  expect_config_error(fine_tune("ft-hf-fresh", folder, fresh), folder + "/tokenizer.model");
  EXPECT_EQ(fine_tune("ft-hf-same", folder, same).exit_code, 0);

  // A folder whose tokenizer is a tokenizer.json (trained here by the tokenizers library):
  // data prepared from the folder records that file and trains; the SentencePiece data is refused.
  std::filesystem::remove(folder + "/tokenizer.model");
  cadre::test::write_text(*dir_ / "tok.py",
                          "import glob, sys\n"
                          "from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers\n"
                          "t = Tokenizer(models.BPE())\n"
                          "t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)\n"
                          "t.decoder = decoders.ByteLevel()\n"
                          "texts = [open(f).read() for f in glob.glob(sys.argv[1] + '/**/*.txt', recursive=True)]\n"
                          "t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=['<|eot|>'],\n"
                          "    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))\n"
                          "t.save(sys.argv[2] + '/tokenizer.json')\n"
                          "open(sys.argv[2] + '/tokenizer_config.json', 'w').write('{\"eos_token\": \"<|eot|>\"}')\n");
  RunResult py = run_process({CADRE_VENV_PYTHON, *dir_ / "tok.py", *dir_ / "text", folder});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const std::string json_data = prepare("data-json", 0, folder);
  const nlohmann::json json_manifest = nlohmann::json::parse(cadre::file_read(json_data + "/manifest.json"));
  EXPECT_EQ(json_manifest["tokenizer"], "tokenizer.json");
  EXPECT_EQ(json_manifest["eos_id"], 0);   // tokenizer_config.json's <|eot|>: trained vocabularies start with specials
  EXPECT_EQ(json_manifest["bos_id"], -1);  // it names no bos_token
  expect_config_error(fine_tune("ft-hf-json", folder, same), folder + "/tokenizer.json");
  EXPECT_EQ(fine_tune("ft-hf-json-same", folder, json_data).exit_code, 0);
  std::filesystem::remove(folder + "/tokenizer.json");
  r = fine_tune("ft-hf-none", folder, fresh);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("came with no tokenizer"), std::string::npos) << r.output;
}
