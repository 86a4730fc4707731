// A training run's set-up, everything before its first step: inputs checked against the
// config (ConfigError, exit code 2, before any work), the run directory and its config.yaml,
// the ranks as a dp x tp mesh with the strategy's groups, the model built and parallelized
// (tensor parallelism over tp, FSDP or ZeRO-1 over dp; a model that can be built deferred is
// made in shards, each rank filling its own), the optimizer, the LR schedule and the data. The
// trainer only sees models/model.h.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "ckpt/checkpoint_param_source.h"
#include "ckpt/hf_param_source.h"
#include "comm/comm.h"
#include "core/config.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "optim/lr_schedule.h"
#include "shard/device_mesh.h"
#include "shard/fully_shard.h"
#include "shard/parallel_groups.h"
#include "train/batch_source.h"
#include "train/memory_fit.h"
#include "train/pipeline_run.h"

namespace cadre {

// Members in the order they are built (and destroyed in reverse).
struct RunSetup {
  std::chrono::steady_clock::time_point t_start;  // run_set_up's start
  Config c;  // completed: train.init_from's model keys and the model's defaults filled in
  comm::JobEnv env;
  c10::Device device{c10::kCPU};  // train.device resolved (under `cadre run`, LOCAL_RANK's GPU)
  std::unique_ptr<Model> model;
  std::unique_ptr<PipelineRun> pipeline;  // parallel.pp_size > 1: this rank's stage (null otherwise)
  std::vector<std::string> lora_layers;  // the layers lora.* gave adapters (empty: lora.rank 0)
  int rank = 0, world = 1;
  bool lead = true;  // rank 0 writes the run directory and shows progress
  FullyShardOptions shard_options;
  std::unique_ptr<DeviceMesh> mesh;
  ParallelGroups groups;
  comm::Communicator* group = nullptr;  // every rank (null on one rank)
  int dp = 1, dp_rank = 0;              // data-parallel size and this rank's index
  // Where a deferred model's shards were read from (null for a model initialised whole), and
  // the same when it is train.init_from's Hugging Face folder (its bytes read, for the log) or
  // Cadre checkpoint (its buffers are loaded after: init_from_load).
  std::shared_ptr<const ParamSource> param_source;
  std::shared_ptr<HfParamSource> hf_source;
  std::shared_ptr<CheckpointParamSource> checkpoint_source;
  FSDPModule sharded;                   // the model's FSDP (or DDP, ZeRO-1) handle
  FitCheck memory;                      // the estimate it was checked against before its shards were made
  double model_ready_s = 0;             // from run_set_up's start until the shards were made
  int64_t rss_before_model = 0;         // resident bytes once the mesh was up, before the model
  int64_t anon_before_model = 0;        // the anonymous part of them (memory_fit.h)
  std::unique_ptr<Optimizer> optimizer;  // optim.name's, over this rank's float32 shard (null: train.steps 0)
  LrSchedule schedule{};
  std::unique_ptr<BatchSource> train_data;  // null when train.steps is 0
  std::unique_ptr<BatchSource> val_data;  // null when train.eval_interval is 0
};

// Collective over the job (the mesh; for a model that initialises itself whole, the broadcast
// of its weights). With train.steps 0 it stops after the model: no optimizer, no data. The ranks are the
// launcher's (JobEnv::from_env) unless `env` says otherwise (a group re-formed in memory).
// The sharding options the config asks for (parallel.*'s strategy, mixed precision, prefetch; a
// LoRA base kept in the compute dtype; no groups yet). The memory estimate reads them too.
FullyShardOptions shard_options_of(const Config& c);

std::unique_ptr<RunSetup> run_set_up(const Config& config, const std::optional<comm::JobEnv>& env = std::nullopt);

}  // namespace cadre
