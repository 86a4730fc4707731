// Cadre's public API for a program that trains its own libtorch module: the job's ranks and
// collectives, sharded data parallelism (fully_shard, DDP buckets, ZeRO-1, no_sync, wrap
// policies, activation checkpointing), the dp x tp mesh and tensor-parallel collectives, and
// the optimizers. Link Cadre::cadre (find_package(Cadre)) and
// launch the program under `cadre run`, which sets RANK, WORLD_SIZE, MASTER_ADDR, ... as
// torchrun does. See examples/custom_module/ for a complete program.
#pragma once

#include "comm/comm.h"                  // cadre::comm::JobEnv, Communicator
#include "optim/adamw.h"                // cadre::AdamW over the shard pieces
#include "optim/lr_schedule.h"          // cadre::LrSchedule (warmup + cosine)
#include "optim/sgd.h"                  // cadre::Sgd (momentum, Nesterov) over the shard pieces
#include "shard/activation_checkpoint.h"  // cadre::apply_activation_checkpointing
#include "shard/deferred_param.h"     // cadre::deferred_empty: parameters made in shards (a ParamSource)
#include "shard/device_mesh.h"         // cadre::DeviceMesh: the ranks as dp x tp
#include "shard/fully_shard.h"          // cadre::fully_shard, FSDPModule, Strategy
#include "shard/module_hooks.h"         // cadre::call: run a module with its hooks
#include "shard/parallel_groups.h"      // cadre::make_parallel_groups
#include "shard/tp_collectives.h"       // cadre::copy_to_tp_region, reduce_from_tp_region (Megatron's f, g)
#include "shard/vocab_parallel.h"       // cadre::vocab_parallel_embedding, vocab_parallel_cross_entropy
#include "shard/wrap_policy.h"          // cadre::auto_wrap, wrap_by_type, wrap_by_param_count
