// train_dry_run (dry_run.h). The units and their sizes come from the model's own parallelize on
// a one-rank mesh, so they are the ones a real run makes; a world of N ranks then shards each
// unit over its shard group. With tensor parallelism each unit is planned at 1/tp of its size:
// the parameters that stay whole (norm scales) are under 0.01% of a Llama.
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
#include "train/run_setup.h"

namespace cadre {
namespace {

// Ranks one unit is sharded over in a world of `world` ranks.
int64_t planned_shard_group(const ParallelConfig& p, int64_t world) {
  const int64_t dp = world / p.tp_size;
  if (p.strategy != Strategy::HybridShard) return dp;
  CADRE_CONFIG_CHECK(p.shard_group_size > 0 && dp % p.shard_group_size == 0, "--dry-run with HYBRID_SHARD needs "
                     "parallel.shard_group_size dividing the data-parallel size ", dp, ", got ", p.shard_group_size);
  return p.shard_group_size;
}

}  // namespace

void train_dry_run(const Config& config, int64_t world_size) {
  const ParallelConfig& p = config.parallel;
  CADRE_CONFIG_CHECK(world_size >= 1 && world_size % p.tp_size == 0, "--world-size ", world_size,
                     " must be a positive multiple of parallel.tp_size ", p.tp_size);
  std::unique_ptr<Model> model = model_build(config, /*deferred=*/true);
  const bool lora = !lora_add_adapters(config, *model, /*lead=*/true).empty();
  model->check_parallel(p);
  Config one_rank = config;
  one_rank.parallel.tp_size = 1;
  DeviceMesh mesh(comm::JobEnv{}, 1, comm::CommOptions{});
  FSDPModule sharded = model->parallelize(mesh, shard_options_of(one_rank), one_rank.parallel);
  if (!config.train.freeze.empty()) freeze_parameters(model->module(), config.train.freeze, config.train.steps > 0);
  if (lora) lora_freeze_base(model->module());
  ShardPlan plan = sharded.plan();
  for (auto* flats : {&plan.flats, &plan.frozen})
    for (auto& f : *flats) f.numel = (f.numel + p.tp_size - 1) / p.tp_size;
  plan = plan.regrouped(static_cast<int>(planned_shard_group(p, world_size)));

  FitCheck check;
  check.estimate = estimate_memory(estimate_inputs(config, *model, plan, config.train.device == "cpu",
                                                 world_size / p.tp_size));
  check.baseline = process_anon_rss_bytes();  // this process before any model storage, as a rank's
  if (!config.train.memory_limit.empty())
    check.config_limit = parse_byte_size(config.train.memory_limit, "train.memory_limit");
  std::printf("dry run: %s on %lld ranks (dp %lld x tp %lld), %s, %s compute, %s%s\n", model->describe().c_str(),
              static_cast<long long>(world_size), static_cast<long long>(world_size / p.tp_size),
              static_cast<long long>(p.tp_size), strategy_name(p.strategy), p.mixed_precision.param_dtype.c_str(),
              config.optim.name.c_str(), p.activation_checkpointing ? ", activation checkpointing" : "");
  std::printf("units: %zu%s, the largest %s; each rank keeps %lld of %lld parameters\n", plan.flats.size(),
              plan.frozen.empty() ? "" : " training", format_bytes(plan.largest_padded() * 4).c_str(),
              static_cast<long long>(plan.shard_numel()), static_cast<long long>(plan.numel()));
  if (!plan.frozen.empty())
    std::printf("frozen (train.freeze, a LoRA base): %zu units; each rank keeps %lld of %lld frozen parameters\n",
                plan.frozen.size(), static_cast<long long>(plan.frozen_shard_numel()),
                static_cast<long long>(plan.frozen_numel()));
  std::printf("%s\n", check.to_text().c_str());
  std::printf("per rank bytes: %s\n", check.estimate.to_json().dump().c_str());
  std::fflush(stdout);
  require_fit(check, 0);
}

}  // namespace cadre
