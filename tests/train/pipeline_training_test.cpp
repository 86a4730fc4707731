// Pipeline parallelism in `cadre train` (parallel.pp_size), with real processes on the tiny
// Llama (4 blocks, untied head): every layout (pp, dp, tp) and schedule follows one rank that
// runs the same micro-batches in turn, under bf16 and SGD too, with a head tied to the embedding
// too; a checkpoint written by 2 stages resumes on 1 and on 4 stages with the losses of an
// uninterrupted run, and exports as the whole model; LoRA dropout draws one rank's masks; each
// step's record splits every stage's time into compute and waiting; layouts the pipeline cannot
// run are config errors (exit 2) naming the key, before any work; validation runs through the
// stages and follows one rank's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/hf_folder.h"
#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"
#include "support/tiny_train.h"

namespace {

constexpr int kSteps = 8;
constexpr int64_t kGlobalBatch = 8;  // samples per step, whatever the layout

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::vector<nlohmann::json> records;
  std::string output;
};

// A layout a test runs: `world` ranks, `dp` of them data-parallel, each splitting its share of
// the global batch into `accum` micro-batches, with these overrides.
struct Layout {
  const char* name;
  int world, dp;
  std::vector<std::string> sets;
  int accum = 4;
};

class PipelineTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("pipeline-training");
    cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
  }
  static void TearDownTestSuite() { delete dir_; }

  // `world` ranks; `dp` of them split the global batch into `accum` micro-batches each.
  static TrainRun train(const std::string& run, int world, int dp, int accum, std::vector<std::string> sets,
                        int expected_exit = 0) {
    sets.insert(sets.begin(), {"model.n_layers=4", "train.steps=" + std::to_string(kSteps),
                               "optim.grad_accum_steps=" + std::to_string(accum),
                               "data.batch_size=" + std::to_string(kGlobalBatch / (dp * accum))});
    const auto argv = cadre::test::tiny_train_command(*dir_ / "data", *dir_ / run, sets);
    TrainRun out;
    if (world == 1) {
      auto r = cadre::test::run_process(argv, {}, 300);
      EXPECT_EQ(r.exit_code, expected_exit) << r.output;
      out.output = r.output;
    } else {
      auto results = cadre::testing::run_ranks(world, argv);
      for (const auto& r : results) EXPECT_EQ(r.exit_code, expected_exit) << cadre::testing::describe(results);
      out.output = cadre::testing::describe(results);
    }
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      out.records.push_back(nlohmann::json::parse(line));
      out.losses.push_back(out.records.back()["loss"].get<double>());
      out.grad_norms.push_back(out.records.back()["grad_norm"].get<double>());
    }
    return out;
  }

  // Steps 5-8 of run `run` on `stages` stages (one rank: 1), resumed from `saved`, a step-4
  // checkpoint copied into the run's checkpoints.
  static TrainRun resume_from(const std::filesystem::path& saved, const std::string& run, int stages,
                              std::vector<std::string> sets) {
    const std::filesystem::path checkpoints = *dir_ / (run + "/checkpoints");
    std::filesystem::create_directories(checkpoints);
    std::filesystem::copy(saved, checkpoints / "step-00000004", std::filesystem::copy_options::recursive);
    sets.push_back("parallel.pp_size=" + std::to_string(stages));
    TrainRun out = train(run, stages, 1, 4, sets);
    EXPECT_NE(out.output.find("resumed from"), std::string::npos) << out.output;
    return out;
  }

  // One rank running the pipeline's 4 micro-batches in turn, and the order spread of the same
  // global batch in 2 and in 8 micro-batches (support/order_spread.h).
  static cadre::test::OrderSpread one_rank(const std::string& run = "one", const std::vector<std::string>& sets = {}) {
    const TrainRun one = train(run, 1, 1, 4, sets);
    EXPECT_EQ(one.losses.size(), size_t(kSteps));
    if (!one.losses.empty()) {
      EXPECT_LT(one.losses.back(), one.losses.front() - 0.1);  // the loss moves
    }
    std::vector<std::vector<double>> variants;
    for (int accum : {2, 8})
      variants.push_back(train(run + "-accum" + std::to_string(accum), 1, 1, accum, sets).losses);
    return cadre::test::OrderSpread(one.losses, variants);
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* PipelineTraining::dir_ = nullptr;

// A stage computes the same operations on the same micro-batches as one rank does (under
// interleaved as well: its chunks are the same blocks, run in another order); what differs is
// where the step's loss is summed (the last stage, then an all-reduce in float32)
// and, with dp or tp, the order of the gradient sums: within the order spread of one rank.
// A wrong pipeline is far outside it: a gradient not sent back leaves the first stage's blocks
// untrained, a micro-batch weighted twice moves the first step's loss by percents.
TEST_F(PipelineTraining, EveryLayoutAndScheduleFollowsOneRank) {
  const cadre::test::OrderSpread one = one_rank();
  const std::vector<Layout> layouts = {
      {"pp 2 gpipe", 2, 1, {"parallel.pp_size=2", "parallel.pp_schedule=GPipe"}},
      {"pp 2 1f1b", 2, 1, {"parallel.pp_size=2", "parallel.pp_schedule=1f1b"}},
      {"pp 4 1f1b", 4, 1, {"parallel.pp_size=4"}},
      {"pp 2 x dp 2 FULL_SHARD 1f1b", 4, 2, {"parallel.pp_size=2", "parallel.strategy=FULL_SHARD"}},
      {"pp 2 x dp 2 NO_SHARD gpipe", 4, 2, {"parallel.pp_size=2", "parallel.pp_schedule=gpipe"}},
      {"pp 2 x dp 2 ZERO1 1f1b", 4, 2, {"parallel.pp_size=2", "parallel.strategy=ZERO1"}},
      {"pp 2 x dp 2 SHARD_GRAD_OP 1f1b", 4, 2, {"parallel.pp_size=2", "parallel.strategy=SHARD_GRAD_OP"}},
      // Two replicas of shard groups of 2 per stage, each rank 2 micro-batches of 1 sample.
      {"pp 2 x dp 4 HYBRID_SHARD (2 x 2) 1f1b", 8, 4,
       {"parallel.pp_size=2", "parallel.strategy=HYBRID_SHARD", "parallel.shard_group_size=2"}, 2},
      {"pp 2 x tp 2 1f1b", 4, 1, {"parallel.pp_size=2", "parallel.tp_size=2"}},
      {"pp 2 x dp 2 x tp 2 FULL_SHARD 1f1b", 8, 2,
       {"parallel.pp_size=2", "parallel.tp_size=2", "parallel.strategy=FULL_SHARD"}},
      {"pp 2 1f1b, activation checkpointing", 2, 1, {"parallel.pp_size=2", "parallel.activation_checkpointing=true"}},
      // Interleaved: each rank holds 2 chunks of one block (stage 0 blocks 0 and 2, stage 1
      // blocks 1 and 3), each backward runs through one of them. FULL_SHARD reduces each
      // chunk's units in its own backwards; NO_SHARD (one bucket straddling both chunks) and
      // ZERO1 accumulate both chunks and reduce at the end of chunk 0's last backward, which
      // chunk 1's units sit out.
      {"pp 2 interleaved", 2, 1, {"parallel.pp_size=2", "parallel.pp_schedule=interleaved"}},
      {"pp 2 x dp 2 FULL_SHARD interleaved", 4, 2,
       {"parallel.pp_size=2", "parallel.pp_schedule=Interleaved", "parallel.strategy=FULL_SHARD"}},
      {"pp 2 x dp 2 NO_SHARD interleaved", 4, 2, {"parallel.pp_size=2", "parallel.pp_schedule=interleaved"}},
      {"pp 2 x dp 2 ZERO1 interleaved", 4, 2,
       {"parallel.pp_size=2", "parallel.pp_schedule=interleaved", "parallel.strategy=ZERO1"}},
  };
  int index = 0;
  for (const Layout& l : layouts) {
    // With dp 2 each rank takes 2 of the 4 micro-batches' samples: the same 4 micro-batches.
    const TrainRun run = train("layout-" + std::to_string(index++), l.world, l.dp, l.accum, l.sets);
    ASSERT_EQ(run.losses.size(), size_t(kSteps)) << l.name << "\n" << run.output;
    one.expect_follows(run.losses, std::string("[pipeline] ") + l.name + " vs 1 rank");
  }
}

// The layouts hold under the other dtype policy and the other optimizer, each against one rank
// of its own (bf16 compute over float32 masters: a stage runs one rank's bf16 operations on the
// same micro-batches; SGD with Nesterov momentum: its buffer is kept per stage like AdamW's
// moments), gradients clipped to the global norm across stages in both.
TEST_F(PipelineTraining, Bf16AndSgdFollowTheirOwnOneRank) {
  struct Policy {
    const char* name;
    std::vector<std::string> sets;
  };
  const std::vector<Policy> policies = {
      {"bf16", {"parallel.mixed_precision.param_dtype=bfloat16"}},
      {"sgd", {"optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true", "optim.lr=0.05"}},
  };
  const std::vector<Layout> layouts = {
      {"pp 2 1f1b", 2, 1, {"parallel.pp_size=2"}},
      {"pp 2 x dp 2 FULL_SHARD interleaved", 4, 2,
       {"parallel.pp_size=2", "parallel.pp_schedule=interleaved", "parallel.strategy=FULL_SHARD"}},
  };
  for (const Policy& policy : policies) {
    const cadre::test::OrderSpread one = one_rank(std::string("one-") + policy.name, policy.sets);
    int index = 0;
    for (const Layout& l : layouts) {
      std::vector<std::string> sets = policy.sets;
      sets.insert(sets.end(), l.sets.begin(), l.sets.end());
      const TrainRun run = train(std::string(policy.name) + "-" + std::to_string(index++), l.world, l.dp, 4, sets);
      ASSERT_EQ(run.losses.size(), size_t(kSteps)) << policy.name << " " << l.name << "\n" << run.output;
      one.expect_follows(run.losses, std::string("[pipeline] ") + policy.name + ", " + l.name + " vs 1 rank");
    }
  }
}

// A head tied to the embedding: the first stage looks tokens up in the table, the last holds its
// own copy for the head, and the two stages' gradients of it are summed after each backward, so
// both copies take one rank's step. Every layout follows one tied rank; without the sum the
// first stage's table never learns from the head and the loss leaves the spread in the first
// steps. The 2-stage checkpoint holds the table once and resumes on 1 and on 4 stages (where
// the middle stages hold no table).
TEST_F(PipelineTraining, TiedEmbeddingsAcrossStagesFollowOneRank) {
  const std::string tied = "model.tie_embeddings=true";
  const TrainRun one_tied = train("tied-one", 1, 1, 4, {tied});
  ASSERT_EQ(one_tied.losses.size(), size_t(kSteps)) << one_tied.output;
  EXPECT_LT(one_tied.losses.back(), one_tied.losses.front() - 0.1);
  std::vector<std::vector<double>> variants, variant_norms;
  for (int accum : {2, 8}) {
    const TrainRun variant = train("tied-one-accum" + std::to_string(accum), 1, 1, accum, {tied});
    variants.push_back(variant.losses);
    variant_norms.push_back(variant.grad_norms);
  }
  const cadre::test::OrderSpread one(one_tied.losses, variants);
  // The gradient norm counts the table once, as one rank's does (the last stage's copy is not
  // counted again).
  const cadre::test::OrderSpread one_norms(one_tied.grad_norms, variant_norms);
  const std::vector<Layout> layouts = {
      {"tied pp 2 1f1b", 2, 1, {"parallel.pp_size=2"}},
      {"tied pp 4 gpipe", 4, 1, {"parallel.pp_size=4", "parallel.pp_schedule=gpipe"}},
      {"tied pp 2 x dp 2 FULL_SHARD 1f1b", 4, 2, {"parallel.pp_size=2", "parallel.strategy=FULL_SHARD"}},
      {"tied pp 2 x dp 2 ZERO1 interleaved", 4, 2,
       {"parallel.pp_size=2", "parallel.pp_schedule=interleaved", "parallel.strategy=ZERO1"}},
      {"tied pp 2 x tp 2 1f1b", 4, 1, {"parallel.pp_size=2", "parallel.tp_size=2"}},
  };
  int index = 0;
  for (Layout l : layouts) {
    l.sets.push_back(tied);
    const TrainRun run = train("tied-layout-" + std::to_string(index++), l.world, l.dp, 4, l.sets);
    ASSERT_EQ(run.losses.size(), size_t(kSteps)) << l.name << "\n" << run.output;
    one.expect_follows(run.losses, std::string("[pipeline] ") + l.name + " vs 1 tied rank");
    one_norms.expect_follows(run.grad_norms, std::string("[pipeline] ") + l.name + " gradient norms vs 1 tied rank");
  }

  const TrainRun first_half = train("tied-resume-pp2", 2, 1, 4, {"parallel.pp_size=2", "train.stop_at=4", tied});
  ASSERT_EQ(first_half.losses.size(), 4u) << first_half.output;
  const std::filesystem::path saved = *dir_ / "tied-resume-pp2/checkpoints/step-00000004";
  ASSERT_TRUE(std::filesystem::exists(saved / "COMMITTED")) << first_half.output;
  const auto exported = cadre::test::run_process(
      {CADRE_BIN, "ckpt", "export", saved.string(), "--format", "hf", "--out", *dir_ / "tied-resume-pp2-hf"}, {}, 120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const cadre::HfFolder folder(*dir_ / "tied-resume-pp2-hf");
  EXPECT_EQ(folder.tensors().size(), 2u + 4u * 9u);  // embedding and norm (the head is the embedding)
  EXPECT_EQ(folder.tensors().count("lm_head.weight"), 0u);
  for (const int stages : {1, 4}) {
    const TrainRun second_half = resume_from(saved, "tied-resume-at-" + std::to_string(stages), stages, {tied});
    ASSERT_EQ(second_half.losses.size(), 4u) << second_half.output;
    one.expect_follows(second_half.losses, "[pipeline] tied pp 2 checkpoint resumed on " + std::to_string(stages) +
                                               " stage(s), steps 5-8", 4);
  }
}

// Two pipeline micro-batches of two data micro-batches each are the same 4 micro-batches
// side by side: the step is one rank's with the batch in 2 parts.
TEST_F(PipelineTraining, PipelineMicroBatchesJoinDataMicroBatches) {
  const TrainRun one = train("join-one", 1, 1, 2, {});
  const TrainRun variant = train("join-variant", 1, 1, 8, {});
  const cadre::test::OrderSpread spread(one.losses, {variant.losses});
  const TrainRun pp = train("join-pp", 2, 1, 4, {"parallel.pp_size=2", "parallel.pp_microbatches=2"});
  ASSERT_EQ(pp.losses.size(), size_t(kSteps)) << pp.output;
  spread.expect_follows(pp.losses, "[pipeline] pp 2, 2 pipeline micro-batches of 2 vs 1 rank in 2");
}

// LoRA dropout's masks are a function of each sample's place in the step's global batch
// (models/lora_dropout.h): a stage draws what one rank draws, also when a pipeline micro-batch
// joins data micro-batches of 2 data-parallel ranks (runs of samples, not one range) and when
// activation checkpointing recomputes a forward after other micro-batches ran. A mask drawn
// for the wrong samples trains other adapters, far outside the order spread.
TEST_F(PipelineTraining, LoraDropoutDrawsOneRanksMasks) {
  const std::vector<std::string> lora = {"lora.rank=4", "lora.dropout=0.2"};
  const TrainRun one = train("lora-one", 1, 1, 4, lora);
  std::vector<std::vector<double>> variants;
  for (int accum : {2, 8}) variants.push_back(train("lora-one-accum" + std::to_string(accum), 1, 1, accum, lora).losses);
  const cadre::test::OrderSpread spread(one.losses, variants);
  const std::vector<Layout> layouts = {
      {"pp 2 1f1b", 2, 1, {"parallel.pp_size=2"}},
      {"pp 2 interleaved", 2, 1, {"parallel.pp_size=2", "parallel.pp_schedule=interleaved"}},
      {"pp 2 x dp 2, pipeline micro-batches of 2, activation checkpointing", 4, 2,
       {"parallel.pp_size=2", "parallel.pp_microbatches=2", "parallel.activation_checkpointing=true"}},
  };
  int index = 0;
  for (const Layout& l : layouts) {
    std::vector<std::string> sets = lora;
    sets.insert(sets.end(), l.sets.begin(), l.sets.end());
    const TrainRun run = train("lora-" + std::to_string(index++), l.world, l.dp, 4, sets);
    ASSERT_EQ(run.losses.size(), size_t(kSteps)) << l.name << "\n" << run.output;
    spread.expect_follows(run.losses, std::string("[pipeline] LoRA dropout 0.2, ") + l.name + " vs 1 rank");
  }
}

// The step's record names every stage's compute and its wait on its neighbours, and `cadre
// report` plots them per stage.
TEST_F(PipelineTraining, EachStepRecordsEveryStagesComputeAndWait) {
  const TrainRun run = train("split", 2, 1, 4, {"parallel.pp_size=2"});
  ASSERT_EQ(run.records.size(), size_t(kSteps)) << run.output;
  for (const auto& r : run.records) {
    ASSERT_TRUE(r.contains("pp_stage_compute_s") && r.contains("pp_stage_wait_s")) << r.dump();
    ASSERT_EQ(r["pp_stage_compute_s"].size(), 2u);
    for (int s = 0; s < 2; ++s) {
      EXPECT_GT(r["pp_stage_compute_s"][s].get<double>(), 0) << r.dump();
      EXPECT_GE(r["pp_stage_wait_s"][s].get<double>(), 0) << r.dump();
      EXPECT_LT(r["pp_stage_compute_s"][s].get<double>(), r["step_time_s"].get<double>()) << r.dump();
    }
  }
  const auto report = cadre::test::run_process({CADRE_BIN, "report", *dir_ / "split"}, {}, 60);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  std::ifstream in(*dir_ / "split/report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* series : {"Pipeline stages", "stage 0 compute", "stage 0 wait", "stage 1 compute", "stage 1 wait"})
    EXPECT_NE(html.find(series), std::string::npos) << series;
}

// Checkpoints name each parameter as the whole model does, so a 2-stage checkpoint is the
// model's, and any layout resumes it: one rank and 4 stages go on with the losses of a run
// that was never interrupted.
TEST_F(PipelineTraining, ATwoStageCheckpointResumesOnOneAndFourStages) {
  const cadre::test::OrderSpread one = one_rank();
  const TrainRun first_half = train("resume-pp2", 2, 1, 4, {"parallel.pp_size=2", "train.stop_at=4"});
  ASSERT_EQ(first_half.losses.size(), 4u) << first_half.output;
  one.expect_follows(first_half.losses, "[pipeline] pp 2, steps 1-4");
  const std::filesystem::path saved = *dir_ / "resume-pp2/checkpoints/step-00000004";
  ASSERT_TRUE(std::filesystem::exists(saved / "COMMITTED")) << first_half.output;
  // The stages' files are the whole model's checkpoint: its Hugging Face export holds every
  // layer, the embedding and the head (as a one-rank run's would), not one stage's share.
  const auto exported = cadre::test::run_process(
      {CADRE_BIN, "ckpt", "export", saved.string(), "--format", "hf", "--out", *dir_ / "resume-pp2-hf"}, {}, 120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const cadre::HfFolder folder(*dir_ / "resume-pp2-hf");
  EXPECT_EQ(folder.tensors().size(), 3u + 4u * 9u);  // embedding, norm, head; 9 tensors per block
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.3.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_EQ(folder.tensors().count(name), 1u) << name;
  const std::vector<std::pair<int, std::string>> resumes = {{1, "1 rank"}, {4, "pp 4"}};
  for (const auto& [stages, name] : resumes) {
    const TrainRun second_half = resume_from(saved, "resume-at-" + std::to_string(stages), stages, {});
    ASSERT_EQ(second_half.losses.size(), 4u) << second_half.output;
    one.expect_follows(second_half.losses, "[pipeline] pp 2 checkpoint resumed on " + name + ", steps 5-8", 4);
  }
}

// Validation runs through the stages too (a forward without a backward, each transfer awaited;
// here interleaved, so through each stage's 2 chunks in turn and across the link from the last
// stage back to the first): the validation loss every 4 steps follows one rank's.
TEST_F(PipelineTraining, ValidationLossFollowsOneRank) {
  auto val_losses = [](const TrainRun& run) {
    std::vector<double> out;
    for (const auto& r : run.records)
      if (r.contains("val_loss")) out.push_back(r["val_loss"].get<double>());
    return out;
  };
  // The whole validation split (eval_batches 0): the same samples whatever the batch size.
  const std::vector<std::string> eval = {"train.eval_interval=4", "train.eval_batches=0"};
  const TrainRun one = train("val-one", 1, 1, 4, eval), variant = train("val-variant", 1, 1, 2, eval);
  ASSERT_EQ(val_losses(one).size(), 2u) << one.output;
  const cadre::test::OrderSpread spread(val_losses(one), {val_losses(variant)});
  std::vector<std::string> pp = eval;
  pp.insert(pp.end(), {"parallel.pp_size=2", "parallel.pp_schedule=interleaved"});
  const TrainRun run = train("val-pp", 2, 1, 4, pp);
  ASSERT_EQ(val_losses(run).size(), 2u) << run.output;
  spread.expect_follows(val_losses(run), "[pipeline] pp 2 interleaved validation loss vs 1 rank");
}

// A stage allocates only its own parameters: the embedding and the first half of the blocks on
// the first of 2 stages, nothing of the rest (the model is dropped to the stage's parts while it
// is still shapes only). The dry run plans each stage with the micro-batches it holds at once:
// under 1F1B the first of 2 stages holds 2, the last 1.
TEST_F(PipelineTraining, AStageHoldsOnlyItsOwnBlocks) {
  const TrainRun run = train("memory", 2, 1, 4, {"parallel.pp_size=2", "train.steps=1"});
  std::ifstream in(*dir_ / "memory/summary.json");
  ASSERT_TRUE(in) << run.output;
  const nlohmann::json summary = nlohmann::json::parse(in);
  // tiny: dim 64, vocabulary 512, untied head; 4 blocks of equal size.
  const int64_t whole = summary["params"].get<int64_t>(), embedding = 512 * 64, head = 512 * 64 + 64;
  const int64_t block = (whole - embedding - head) / 4;
  EXPECT_EQ(summary["memory"]["param_bytes"].get<int64_t>(), 4 * (embedding + 2 * block)) << summary.dump(2);
  EXPECT_EQ(summary["pp_bounds"], nlohmann::json::array({0, 2, 4})) << summary.dump(2);

  std::vector<std::string> argv = cadre::test::tiny_train_command(
      *dir_ / "data", *dir_ / "dry", {"model.n_layers=4", "parallel.pp_size=2", "optim.grad_accum_steps=4"});
  argv.insert(argv.end(), {"--dry-run", "--world-size", "4"});
  const auto dry = cadre::test::run_process(argv, {}, 60);
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("(pp 2 x dp 2 x tp 1)"), std::string::npos) << dry.output;
  auto activations = [&](const std::string& stage) {
    const size_t at = dry.output.find(stage + ": estimated per rank");
    EXPECT_NE(at, std::string::npos) << stage << "\n" << dry.output;
    const size_t from = dry.output.find("activations ", at) + 12;
    return std::stod(dry.output.substr(from, dry.output.find(' ', from) - from));
  };
  EXPECT_GT(activations("stage 0"), activations("stage 1")) << dry.output;  // both in MiB here
  EXPECT_NE(dry.output.find("the heaviest stage is 0"), std::string::npos) << dry.output;
}

// A stage that dies mid-run ends the others' step with an error naming the operation and what
// failed, not a hang: rank 1 is killed once rank 0 has recorded 3 steps, and rank 0 must exit
// non-zero within the collectives' timeout. Where rank 0 is caught depends on where it was: in a
// transfer to or from stage 1 (the error names this stage, the action and the neighbour:
// "pipeline stage 0 B2: waiting for the gradient from stage 1: ..."), or in a collective of the
// whole job, which names rank 1 as the one that did not arrive.
TEST_F(PipelineTraining, ADeadStageEndsTheRunWithAnErrorNotAHang) {
  const std::string metrics = *dir_ / "dead/metrics.jsonl";
  const std::vector<std::string> argv = cadre::test::tiny_train_command(
      *dir_ / "data", *dir_ / "dead",
      {"model.n_layers=4", "parallel.pp_size=2", "optim.grad_accum_steps=4", "train.steps=100000",
       "parallel.comm_timeout=20", "checkpoint.at_end=false"});
  cadre::testing::RankOptions options;
  options.prefix = [&](int rank) -> std::vector<std::string> {
    if (rank != 1) return {};
    // Runs the rank, waits until rank 0 has recorded 3 steps, then kills it.
    const std::string script = "\"$@\" & pid=$!; until [ -f " + metrics + " ] && [ $(wc -l < " + metrics +
                               ") -ge 3 ]; do kill -0 $pid 2>/dev/null || exit 99; sleep 0.05; done; "
                               "kill -9 $pid; wait $pid; exit 137";
    return {"bash", "-c", script, "bash"};
  };
  options.limit = std::chrono::seconds(120);
  const auto results = cadre::testing::run_ranks(2, argv, options);
  ASSERT_EQ(results[1].exit_code, 137) << cadre::testing::describe(results);
  EXPECT_NE(results[0].exit_code, 0) << cadre::testing::describe(results);
  const std::string& out = results[0].output;
  const bool on_link = out.find("pipeline stage 0 ") != std::string::npos &&
                       (out.find("from stage 1") != std::string::npos || out.find("to stage 1") != std::string::npos);
  const bool names_rank = out.find("did not arrive: rank 1") != std::string::npos;
  EXPECT_TRUE(on_link || names_rank) << "rank 0's error should name its stage and stage 1, or rank 1:\n" << out;
  EXPECT_TRUE(out.find("broadcast") != std::string::npos || out.find("all_reduce") != std::string::npos)
      << "rank 0's error should name the operation:\n" << out;
}

// Layouts the pipeline cannot run stop before any work with the key that is wrong.
TEST_F(PipelineTraining, LayoutsThatCannotRunAreConfigErrors) {
  struct Bad {
    int world;
    std::vector<std::string> sets;
    const char* names;
  };
  const std::vector<Bad> bad = {
      {1, {"parallel.pp_size=2"}, "parallel.pp_size 2"},
      {2, {"parallel.pp_size=2", "parallel.pp_schedule=zigzag"}, "parallel.pp_schedule"},
      {2, {"parallel.pp_size=2", "parallel.pp_schedule=interleaved", "parallel.pp_microbatches=1"},
       "parallel.pp_microbatches (1) to be a multiple of parallel.pp_size (2)"},
      {2, {"parallel.pp_size=2", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=3"}, "parallel.pp_chunks 3"},
      {2, {"parallel.pp_size=2", "parallel.pp_chunks=2"}, "parallel.pp_chunks > 1 needs parallel.pp_schedule"},
      {2, {"parallel.pp_size=2", "parallel.pp_split=3,2"}, "parallel.pp_split"},
      {2, {"parallel.pp_size=2", "parallel.pp_microbatches=3"}, "parallel.pp_microbatches 3"},
  };
  int index = 0;
  for (const Bad& b : bad) {
    const TrainRun run = train("bad-" + std::to_string(index++), b.world, 1, 4, b.sets, /*expected_exit=*/2);
    EXPECT_NE(run.output.find(b.names), std::string::npos) << b.names << "\n" << run.output;
    EXPECT_TRUE(run.losses.empty()) << b.names;
  }
}

}  // namespace
