// train_dry_run (dry_run.h). The units and their sizes come from the model's own parallelize on
// a one-rank mesh, so they are the ones a real run makes; a world of N ranks then shards each
// unit over its shard group. With tensor parallelism each unit is planned at 1/tp of its size:
// the parameters that stay whole (norm scales) are under 0.01% of a Llama. With pipeline stages
// each stage is planned from its own blocks and the micro-batches it holds at once; the
// heaviest stage is the one that must fit.
#include "train/dry_run.h"

#include <cstdio>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/strategy.h"
#include "core/sysinfo.h"
#include "models/registry.h"
#include "shard/device_mesh.h"
#include "train/freeze.h"
#include "train/lora_run.h"
#include "train/memory_check.h"
#include "train/pipeline_run.h"
#include "train/run_setup.h"

namespace cadre {
namespace {

// Ranks one unit is sharded over among `dp` data-parallel ranks.
int64_t planned_shard_group(const ParallelConfig& p, int64_t dp) {
  if (p.strategy != Strategy::HybridShard) return dp;
  CADRE_CONFIG_CHECK(p.shard_group_size > 0 && dp % p.shard_group_size == 0, "--dry-run with HYBRID_SHARD needs "
                     "parallel.shard_group_size dividing the data-parallel size ", dp, ", got ", p.shard_group_size);
  return p.shard_group_size;
}

struct PlannedRank {
  std::string model;  // the model's description
  ShardPlan plan;
  FitCheck check;
};

// A rank of pipeline stage `stage` (0 without a pipeline) among `dp` data-parallel ranks.
PlannedRank plan_rank(const Config& config, int64_t dp, int64_t stage) {
  const ParallelConfig& p = config.parallel;
  std::unique_ptr<Model> model = model_build(config, /*deferred=*/true);
  PlannedRank out;
  out.model = model->describe();
  const std::unique_ptr<PipelineRun> pipeline = pipeline_keep_stage(config, *model, stage);
  const bool lora = !lora_add_adapters(config, *model, /*lead=*/stage == 0).empty();
  model->check_parallel(p);
  Config one_rank = config;
  one_rank.parallel.tp_size = 1;
  DeviceMesh mesh(comm::JobEnv{}, 1, comm::CommOptions{});
  FSDPModule sharded = model->parallelize(mesh, shard_options_of(one_rank), one_rank.parallel);
  if (!config.train.freeze.empty()) freeze_parameters(model->module(), config.train.freeze, config.train.steps > 0);
  if (lora) lora_freeze_base(model->module());
  out.plan = sharded.plan();
  for (auto* flats : {&out.plan.flats, &out.plan.frozen})
    for (auto& f : *flats) f.numel = (f.numel + p.tp_size - 1) / p.tp_size;
  out.plan = out.plan.regrouped(static_cast<int>(planned_shard_group(p, dp)));
  const StageActivations activations = pipeline ? pipeline->activations() : StageActivations{};
  out.check.estimate = estimate_memory(
      estimate_inputs(config, *model, out.plan, config.train.device == "cpu", dp, activations));
  out.check.baseline = process_anon_rss_bytes();  // this process before any model storage, as a rank's
  if (!config.train.memory_limit.empty())
    out.check.config_limit = parse_byte_size(config.train.memory_limit, "train.memory_limit");
  return out;
}

void print_plan(const ShardPlan& plan, const std::string& prefix) {
  std::printf("%sunits: %zu%s, the largest %s; each rank keeps %lld of %lld parameters\n", prefix.c_str(),
              plan.flats.size(), plan.frozen.empty() ? "" : " training", format_bytes(plan.largest_padded() * 4).c_str(),
              static_cast<long long>(plan.shard_numel()), static_cast<long long>(plan.numel()));
  if (!plan.frozen.empty())
    std::printf("%sfrozen (train.freeze, a LoRA base): %zu units; each rank keeps %lld of %lld frozen parameters\n",
                prefix.c_str(), plan.frozen.size(), static_cast<long long>(plan.frozen_shard_numel()),
                static_cast<long long>(plan.frozen_numel()));
}

}  // namespace

void train_dry_run(const Config& config, int64_t world_size) {
  const ParallelConfig& p = config.parallel;
  const int64_t model_parallel = p.tp_size * p.pp_size;
  CADRE_CONFIG_CHECK(world_size >= 1 && world_size % model_parallel == 0, "--world-size ", world_size,
                     " must be a positive multiple of parallel.tp_size x parallel.pp_size = ", model_parallel);
  const int64_t dp = world_size / model_parallel;
  std::vector<PlannedRank> ranks;
  for (int64_t stage = 0; stage < p.pp_size; ++stage) ranks.push_back(plan_rank(config, dp, stage));
  const std::string layout = p.pp_size > 1 ? str("pp ", p.pp_size, " x dp ", dp, " x tp ", p.tp_size)
                                           : str("dp ", dp, " x tp ", p.tp_size);
  std::printf("dry run: %s on %lld ranks (%s), %s, %s compute, %s%s\n", ranks[0].model.c_str(),
              static_cast<long long>(world_size), layout.c_str(), strategy_name(p.strategy),
              p.mixed_precision.param_dtype.c_str(), config.optim.name.c_str(),
              p.activation_checkpointing ? ", activation checkpointing" : "");
  size_t heaviest = 0;
  for (size_t s = 0; s < ranks.size(); ++s) {
    const std::string prefix = p.pp_size > 1 ? str("stage ", s, ": ") : "";
    print_plan(ranks[s].plan, prefix);
    if (p.pp_size > 1) std::printf("%s%s\n", prefix.c_str(), ranks[s].check.to_text().c_str());
    if (ranks[s].check.estimate.total() > ranks[heaviest].check.estimate.total()) heaviest = s;
  }
  const FitCheck& check = ranks[heaviest].check;
  if (p.pp_size > 1) std::printf("the heaviest stage is %zu:\n", heaviest);
  std::printf("%s\n", check.to_text().c_str());
  std::printf("per rank bytes: %s\n", check.estimate.to_json().dump().c_str());
  std::fflush(stdout);
  require_fit(check, 0);
}

}  // namespace cadre
