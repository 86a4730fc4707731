// LoRA training end to end (lora.*): real `cadre train` processes fine-tune adapters on every
// projection of a base read from a Hugging Face folder (written by transformers, bf16, split
// into files). Two FULL_SHARD ranks with activation checkpointing, two tensor-parallel ranks and
// FULL_SHARD over dp 2 x tp 2 follow one rank's losses step for step within its order spread,
// with dropout on the adapters' inputs (each sample draws the masks it draws on one rank);
// every checkpoint holds the adapters alone with their optimizer state (a small part of the
// base's bytes) and the base's fingerprint; a checkpoint of 2 ranks resumes on 1 and follows one
// rank's uninterrupted run, and is refused on a base that differs in one weight; the memory
// report counts gradients and optimizer state for the adapters alone. lora.* keys that name nothing or make no sense stop the run before any work
// (exit 2), naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_folder.h"
#include "ckpt/manifest.h"
#include "core/config.h"
#include "core/lora_naming.h"
#include "models/lora.h"
#include "models/registry.h"
#include "support/hf_folder_edit.h"
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

  // A LoRA run (rank 4, alpha 8, dropout 0.1, every projection) from the folder on `world` ranks, the global
  // batch split over the data-parallel ranks. Returns the lead's output and exit code.
  static cadre::test::RunResult run(const std::string& run, int world, int dp, std::vector<std::string> sets) {
    std::vector<std::string> all = {"train.init_from=" + hf_, "model.ffn_dim=192", "lora.rank=4", "lora.alpha=8",
                                    "lora.dropout=0.1", "lora.targets=all-linear", "optim.lr=0.01", "optim.warmup_steps=0",
                                    "train.steps=" + std::to_string(kSteps)};
    all.insert(all.end(), sets.begin(), sets.end());  // later --set wins
    if (std::none_of(all.begin(), all.end(), [](const std::string& s) { return s.rfind("data.batch_size", 0) == 0; }))
      all.push_back("data.batch_size=" + std::to_string(kGlobalBatch / dp));
    const auto argv = cadre::test::tiny_train_command(data_, *dir_ / run, all);
    if (world == 1) return cadre::test::run_process(argv, {}, 300);
    auto results = cadre::testing::run_ranks(world, argv);
    cadre::test::RunResult all_ranks{0, cadre::testing::describe(results)};
    for (const auto& r : results)
      if (all_ranks.exit_code == 0) all_ranks.exit_code = r.exit_code;
    return all_ranks;
  }

  static std::vector<double> losses(const std::string& run) {
    std::vector<double> out;
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return out;
  }

  // run(), which must succeed; returns its per-step losses.
  static std::vector<double> train(const std::string& name, int world, int dp, std::vector<std::string> sets) {
    const auto r = run(name, world, dp, std::move(sets));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string& lead_output = r.output;
    EXPECT_NE(lead_output.find("lora: rank 4, alpha 8, dropout 0.1 on 14 layers"), std::string::npos) << lead_output;
    // The memory report: gradients and optimizer state for the adapters' 2 x 4 x (in + out) per
    // layer (9,728) alone; the base is reported as frozen parameters.
    if (world == 1) {
      EXPECT_NE(lead_output.find("x 0.009728M params"), std::string::npos) << lead_output;
      EXPECT_NE(lead_output.find("; frozen parameters 0.6"), std::string::npos) << lead_output;
    }
    std::vector<double> out = losses(name);
    EXPECT_EQ(out.size(), size_t(kSteps)) << name;
    return out;
  }

  // One rank's losses and their order spread (the same global batch in 2 and 4 micro-batches).
  static const cadre::test::OrderSpread& reference() {
    static const std::vector<double> one = train("one", 1, 1, {});
    static const cadre::test::OrderSpread spread = [] {
      std::vector<std::vector<double>> variants;
      for (int parts : {2, 4})
        variants.push_back(train("one-" + std::to_string(parts), 1, 1,
                                 {"optim.grad_accum_steps=" + std::to_string(parts),
                                  "data.batch_size=" + std::to_string(kGlobalBatch / parts)}));
      return cadre::test::OrderSpread(one, variants);
    }();
    EXPECT_LT(one.back(), one.front() - 0.05) << "the adapters learn";
    return spread;
  }

  // A checkpoint of the run: the adapters alone, each with its optimizer state (B moved from zero
  // by the end), no tensor of the base, the base's fingerprint recorded; its files hold the
  // adapters' float32 values and two AdamW moments and the ranks' RNG states, not a byte more.
  static void expect_adapters_only(const std::string& run, int64_t step) {
    const cadre::CheckpointReader saved(*dir_ / (run + "/checkpoints/step-0000000" + std::to_string(step)));
    EXPECT_TRUE(cadre::manifest_leaves_out_base(saved.manifest())) << run;
    int64_t adapters = 0, adapter_elements = 0, rng_bytes = 0, bytes = 0;
    for (const auto& [name, record] : saved.manifest().tensors) {
      if (name.rfind("rng.", 0) == 0) rng_bytes += record.numel();
      if (name.rfind("model.", 0) != 0) continue;
      EXPECT_TRUE(cadre::lora_is_adapter(name)) << run << ": the checkpoint holds base tensor " << name;
      EXPECT_TRUE(saved.has("optim.exp_avg." + name.substr(6))) << run << ": no optimizer state for " << name;
      if (step == kSteps && cadre::ends_with(name, ".lora_b")) {
        EXPECT_GT(saved.read_tensor(name).abs().max().item<double>(), 0.0) << run << ": " << name << " did not train";
      }
      ++adapters;
      adapter_elements += record.numel();
    }
    for (const auto& f : saved.manifest().files) bytes += f.bytes;
    EXPECT_EQ(adapters, 2 * 2 * 7) << run << ": A and B on 7 projections in each of 2 blocks";
    EXPECT_EQ(adapter_elements, 9728) << run;
    EXPECT_EQ(bytes, 3 * 4 * adapter_elements + rng_bytes) << run;
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
// ranks, or summed twice), or dropout masks that depend on the layout (a row-parallel rank
// drawing a mask for its slice as if it were the whole input), moves the losses outside it.
TEST_F(LoraTraining, ShardedAndTensorParallelRanksFollowOneRank) {
  const cadre::test::OrderSpread& spread = reference();
  spread.expect_follows(train("full-shard", 2, 2, {"parallel.strategy=FULL_SHARD",
                                                   "parallel.activation_checkpointing=true"}),
                        "[lora] FULL_SHARD x 2 + activation checkpointing vs 1 rank");
  spread.expect_follows(train("tp2", 2, 1, {"parallel.tp_size=2"}), "[lora] tp 2 vs 1 rank");
  spread.expect_follows(train("dp2-tp2", 4, 2, {"parallel.tp_size=2", "parallel.strategy=FULL_SHARD"}),
                        "[lora] FULL_SHARD dp 2 x tp 2 vs 1 rank");
  for (const char* run : {"one", "full-shard", "tp2", "dp2-tp2"}) expect_adapters_only(run, kSteps);
}

// A checkpoint of adapters alone resumes at another world size: the base is read from the folder
// again, as at the start, and the run goes on as one rank's uninterrupted run (a base that had
// moved in training, or adapters read into the wrong places, would leave its order spread). On a
// base that differs in one weight it is refused, naming both fingerprints' bases.
TEST_F(LoraTraining, AdapterCheckpointsResumeAtAnotherWorldSizeOnTheirOwnBaseOnly) {
  const cadre::test::OrderSpread& spread = reference();
  auto first = run("resumed", 2, 2, {"parallel.strategy=FULL_SHARD", "train.stop_at=4"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  expect_adapters_only("resumed", 4);
  auto second = run("resumed", 1, 1, {});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::string step4 = *dir_ / "resumed/checkpoints/step-00000004";
  EXPECT_NE(second.output.find("resumed from " + step4 + " at step 4"), std::string::npos) << second.output;
  spread.expect_follows(losses("resumed"), "[lora] FULL_SHARD x 2 to step 4, resumed on 1 rank");

  // Under bf16 compute the base is kept in bf16 shards: the same base, the same fingerprint.
  auto bf16 = run("bf16", 1, 1, {"checkpoint.resume=" + step4, "train.steps=5",
                                 "parallel.mixed_precision.param_dtype=bfloat16"});
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("resumed from " + step4 + " at step 4"), std::string::npos) << bf16.output;

  const std::string other = *dir_ / "hf-other";
  cadre::test::copy_hf_folder_with_one_weight_changed(hf_, other);
  auto refused = run("other-base", 1, 1, {"train.init_from=" + other, "checkpoint.resume=" + step4});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("holds LoRA adapters trained on another base (base fingerprint 0x"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("for this run's base, the Hugging Face folder '" + other + "'"), std::string::npos)
      << refused.output;
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
