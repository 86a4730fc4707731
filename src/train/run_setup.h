// A training run's set-up, everything before its first step: inputs checked against the
// config (ConfigError, exit code 2, before any work), the run directory and its config.yaml,
// the ranks as a dp x tp mesh with the strategy's groups, the model built, made equal on every
// rank and parallelized (tensor parallelism over tp, FSDP or ZeRO-1 over dp), the optimizer,
// the LR schedule and the data. The trainer only sees models/model.h.
#pragma once

#include <memory>
#include <optional>

#include "comm/comm.h"
#include "core/config.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "optim/lr_schedule.h"
#include "shard/device_mesh.h"
#include "shard/fully_shard.h"
#include "shard/parallel_groups.h"
#include "train/batch_source.h"

namespace cadre {

// Members in the order they are built (and destroyed in reverse).
struct RunSetup {
  Config c;  // completed: train.init_from's model keys and the model's defaults filled in
  comm::JobEnv env;
  c10::Device device{c10::kCPU};  // train.device resolved (under `cadre run`, LOCAL_RANK's GPU)
  std::unique_ptr<Model> model;
  int rank = 0, world = 1;
  bool lead = true;  // rank 0 writes the run directory and shows progress
  FullyShardOptions shard_options;
  std::unique_ptr<DeviceMesh> mesh;
  ParallelGroups groups;
  comm::Communicator* group = nullptr;  // every rank (null on one rank)
  int dp = 1, dp_rank = 0;              // data-parallel size and this rank's index
  FSDPModule sharded;                   // the model's FSDP (or DDP, ZeRO-1) handle
  std::unique_ptr<Optimizer> optimizer;  // optim.name's, over this rank's float32 shard
  LrSchedule schedule{};
  std::unique_ptr<BatchSource> train_data;
  std::unique_ptr<BatchSource> val_data;  // null when train.eval_interval is 0
};

// Collective over the job (the mesh, the broadcast of the initial weights). The ranks are the
// launcher's (JobEnv::from_env) unless `env` says otherwise (a group re-formed in memory).
std::unique_ptr<RunSetup> run_set_up(const Config& config, const std::optional<comm::JobEnv>& env = std::nullopt);

}  // namespace cadre
