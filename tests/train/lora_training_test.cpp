// LoRA training end to end (lora.*): real `cadre train` processes fine-tune adapters on every
// projection of a base read from a Hugging Face folder (written by transformers, bf16, split
// into files). Two FULL_SHARD ranks with activation checkpointing, two tensor-parallel ranks and
// FULL_SHARD over dp 2 x tp 2 follow one rank's losses step for step within its order spread;
// in every final checkpoint the base is the folder's values bit for bit with no optimizer state,
// and the adapters have theirs; the memory report counts gradients and optimizer state for the
// adapters alone. lora.* keys that name nothing or make no sense stop the run before any work
// (exit 2), naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_folder.h"
#include "core/config.h"
#include "models/lora.h"
#include "models/registry.h"
#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"
#include "support/tiny_train.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kGlobalBatch = 8;
constexpr int kSteps = 8;

class LoraTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("lora-training");
    data_ = cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
    hf_ = *dir_ / "hf";
    auto r = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_random_folder.py", hf_,
                                       "64", "2", "4", "2", "192", "512", "60KB"},
                                      {}, 600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  // A LoRA run (rank 4, alpha 8, every projection) from the folder on `world` ranks, the global
  // batch split over the data-parallel ranks. Returns its per-step losses.
  static std::vector<double> train(const std::string& run, int world, int dp, std::vector<std::string> sets) {
    sets.insert(sets.end(), {"train.init_from=" + hf_, "model.ffn_dim=192", "lora.rank=4", "lora.alpha=8",
                             "lora.targets=all-linear", "optim.lr=0.01", "optim.warmup_steps=0",
                             "train.steps=" + std::to_string(kSteps)});
    if (std::none_of(sets.begin(), sets.end(), [](const std::string& s) { return s.rfind("data.batch_size", 0) == 0; }))
      sets.push_back("data.batch_size=" + std::to_string(kGlobalBatch / dp));
    const auto argv = cadre::test::tiny_train_command(data_, *dir_ / run, sets);
    std::string lead_output;
    if (world == 1) {
      auto r = cadre::test::run_process(argv, {}, 300);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      lead_output = r.output;
    } else {
      auto results = cadre::testing::run_ranks(world, argv);
      for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
      lead_output = results[0].output;
    }
    EXPECT_NE(lead_output.find("lora: rank 4, alpha 8, dropout 0 on 14 layers"), std::string::npos) << lead_output;
    // The memory report: gradients and optimizer state for the adapters' 2 x 4 x (in + out) per
    // layer (9,728) alone; the base is reported as frozen parameters.
    if (world == 1) {
      EXPECT_NE(lead_output.find("x 0.009728M params"), std::string::npos) << lead_output;
      EXPECT_NE(lead_output.find("; frozen parameters 0.6"), std::string::npos) << lead_output;
    }
    std::vector<double> losses;
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    EXPECT_EQ(losses.size(), size_t(kSteps)) << run;
    return losses;
  }

  // The run's final checkpoint: the base as the folder holds it, widened from bf16, with no
  // optimizer state; every adapter trained (B moved from zero) with optimizer state.
  static void expect_frozen_base(const std::string& run) {
    const cadre::CheckpointReader saved(*dir_ / (run + "/checkpoints/step-0000000" + std::to_string(kSteps)));
    const cadre::HfFolder folder(hf_);
    cadre::Config config;
    auto adapter = cadre::model_state_dict_adapter(config);
    int64_t base = 0, adapters = 0;
    for (const auto& [name, t] : folder.tensors()) {
      const std::string own = adapter->internal_name(name);
      at::Tensor want = at::empty(t.shape, at::kFloat);
      folder.read_float32(t, want.data_ptr<float>());
      EXPECT_TRUE(at::equal(saved.read_tensor("model." + own), want)) << run << ": frozen " << own << " changed";
      EXPECT_FALSE(saved.has("optim.exp_avg." + own)) << run << ": optimizer state for frozen " << own;
      ++base;
    }
    for (const auto& [name, record] : saved.manifest().tensors) {
      if (name.rfind("model.", 0) != 0 || !cadre::lora_is_adapter(name)) continue;
      EXPECT_TRUE(saved.has("optim.exp_avg." + name.substr(6))) << run << ": no optimizer state for " << name;
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_b") == 0) {
        EXPECT_GT(saved.read_tensor(name).abs().max().item<double>(), 0.0) << run << ": " << name << " did not train";
      }
      ++adapters;
    }
    EXPECT_EQ(base, 3 + 2 * 9) << run;
    EXPECT_EQ(adapters, 2 * 2 * 7) << run << ": A and B on 7 projections in each of 2 blocks";
  }

  static cadre::test::TempDir* dir_;
  static std::string data_, hf_;
};
cadre::test::TempDir* LoraTraining::dir_ = nullptr;
std::string LoraTraining::data_, LoraTraining::hf_;

// float32 throughout. Sharding and splitting change only the order of sums (the gradient
// reduce-scatter, a row-parallel layer's all-reduce, the adapters' tensor-parallel gradient
// sums): agreement within one rank's order spread (the same global batch in 2 and 4
// micro-batches). A wrong tensor-parallel adapter (a factor's gradient not summed over the
// ranks, or summed twice) moves the second step's loss far outside it.
TEST_F(LoraTraining, ShardedAndTensorParallelRanksFollowOneRank) {
  const std::vector<double> one = train("one", 1, 1, {});
  std::vector<std::vector<double>> variants;
  for (int parts : {2, 4})
    variants.push_back(train("one-" + std::to_string(parts), 1, 1,
                             {"optim.grad_accum_steps=" + std::to_string(parts),
                              "data.batch_size=" + std::to_string(kGlobalBatch / parts)}));
  ASSERT_EQ(one.size(), size_t(kSteps));
  EXPECT_LT(one.back(), one.front() - 0.05) << "the adapters learn";
  const cadre::test::OrderSpread spread(one, variants);
  spread.expect_follows(train("full-shard", 2, 2, {"parallel.strategy=FULL_SHARD",
                                                   "parallel.activation_checkpointing=true"}),
                        "[lora] FULL_SHARD x 2 + activation checkpointing vs 1 rank");
  spread.expect_follows(train("tp2", 2, 1, {"parallel.tp_size=2"}), "[lora] tp 2 vs 1 rank");
  spread.expect_follows(train("dp2-tp2", 4, 2, {"parallel.tp_size=2", "parallel.strategy=FULL_SHARD"}),
                        "[lora] FULL_SHARD dp 2 x tp 2 vs 1 rank");
  for (const char* run : {"one", "full-shard", "tp2", "dp2-tp2"}) expect_frozen_base(run);
}

TEST_F(LoraTraining, BadLoraKeysStopBeforeAnyWork) {
  for (const auto& [set, says] : std::vector<std::pair<std::string, std::string>>{
           {"lora.targets=q_prj", "lora.targets: 'q_prj' matches no linear layer of the model"},
           {"lora.targets=wq,(", "lora.targets: '(' is not a regular expression"},
           {"lora.dropout=1", "lora.dropout must be in [0, 1), got 1"},
           {"lora.rank=-2", "lora.rank must be >= 0"},
           {"lora.alpha=0", "lora.alpha must be > 0"}}) {
    std::vector<std::string> sets = {set, "train.steps=1"};
    if (set.rfind("lora.rank", 0) != 0) sets.push_back("lora.rank=4");
    auto r = cadre::test::run_process(cadre::test::tiny_train_command(data_, *dir_ / "bad", sets), {}, 120);
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << set << "\n" << r.output;
  }
}

}  // namespace
