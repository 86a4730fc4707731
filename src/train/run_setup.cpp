// Building a run before its first step (see run_setup.h), in this order: config and inputs,
// run directory, threads, sharding options, flight recorder, mesh and groups, the model's
// weights (made in shards for a deferred model), parallelization, the memory check
// (memory_check.h: before the shards are allocated), optimizer, data.
#include "train/run_setup.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/cpu_block_cache.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sysinfo.h"
#include "data/manifest.h"
#include "models/registry.h"
#include "obs/flight_recorder.h"
#include "optim/make_optimizer.h"
#include "rdzv/membership.h"
#include "train/data_tokenizer_check.h"
#include "train/freeze.h"
#include "train/init_from.h"
#include "train/lora_import.h"
#include "train/lora_run.h"
#include "train/memory_check.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// HYBRID_SHARD's shard group, in data-parallel ranks: parallel.shard_group_size, or the
// data-parallel ranks of one node. It must divide the data-parallel size, and with one node
// and no size given it would be FULL_SHARD in disguise.
int64_t hybrid_group_size(const Config& c, const comm::JobEnv& env) {
  const int64_t tp = c.parallel.tp_size, dp = env.world_size / (tp * c.parallel.pp_size);
  int64_t size = c.parallel.shard_group_size;
  if (size == 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int64_t per_node = local && *local ? std::atoll(local) : env.world_size;
    size = std::max<int64_t>(1, per_node / tp);
    CADRE_CONFIG_CHECK(dp == 1 || size < dp, "parallel.shard_group_size: HYBRID_SHARD needs a shard group size > 0 when all ",
                       dp, " data-parallel ranks are on one node (LOCAL_WORLD_SIZE=", per_node, ", tp_size ", tp,
                       "); set it, or use FULL_SHARD");
  }
  CADRE_CONFIG_CHECK(size >= 1 && dp % size == 0, "parallel.shard_group_size ", size,
                     " does not divide the data-parallel size ", dp, " (WORLD_SIZE=", env.world_size, " / tp_size ", tp, ")");
  return size;
}

// Inputs the config points at must agree with it before any work starts (exit code 2). A run
// that only loads (train.steps 0) needs no data, but data it is given must fit.
void check_inputs(const Config& c, const Model& model, bool lead) {
  if (c.train.steps == 0 && c.data.dir.empty()) return;
  CADRE_CONFIG_CHECK(!c.data.dir.empty(), "data.dir is not set (a directory written by `cadre data prepare`)");
  CADRE_CONFIG_CHECK(fs::is_directory(c.data.dir), "data.dir '", c.data.dir, "' is not a directory");
  DatasetManifest m = manifest_read(c.data.dir);
  if (m.kind == "encoded_images") m.height = m.width = c.data.image_size;  // what the loader crops to
  try {
    model.check_data(m);
  } catch (const ConfigError& e) {
    throw ConfigError(str("data.dir '", c.data.dir, "': ", e.what()));
  }
  check_data_tokenizer(c, m, lead);  // fine-tuning: the model's own token ids
}

void set_threads(int64_t threads) {
  at::set_num_threads(static_cast<int>(threads));
  // Inter-op threads can be set once per process, before any parallel work.
  static bool interop_set = false;
  if (!interop_set) {
    at::set_num_interop_threads(1);
    interop_set = true;
  }
}

// The config, the model and the inputs, checked; the run directory with the resolved config.
void set_up_inputs(RunSetup& r, const Config& config, const std::optional<comm::JobEnv>& env) {
  r.c = config;
  init_from_config(r.c);      // fine-tuning: model keys the config leaves out come from the checkpoint
  lora_init_from_config(r.c);  // a PEFT adapter to start from: its rank, alpha and layers
  model_config_resolve(r.c);  // the model's keys, checked and complete in config.yaml
  r.env = env ? *env : comm::JobEnv::from_env();
  r.device = device_select(r.c.train.device, "train.device");
  cpu_block_cache::install();  // before the model: steps reuse their large blocks
  r.model = model_build(r.c, /*deferred=*/true);  // shapes only, where the model can: made in shards
  CADRE_CONFIG_CHECK(r.env.world_size % r.c.parallel.tp_size == 0, "parallel.tp_size ", r.c.parallel.tp_size,
                     " does not divide WORLD_SIZE=", r.env.world_size,
                     " (data parallelism runs over WORLD_SIZE / tp_size)");
  const int64_t pp = r.c.parallel.pp_size;
  CADRE_CONFIG_CHECK(r.env.world_size % (pp * r.c.parallel.tp_size) == 0, "parallel.pp_size ", pp,
                     " x parallel.tp_size ", r.c.parallel.tp_size, " does not divide WORLD_SIZE=", r.env.world_size,
                     " (data parallelism runs over WORLD_SIZE / (pp_size x tp_size))");
  // Before anything reads the parameters: a stage drops the rest of the model while it is shapes only.
  r.pipeline = pipeline_keep_stage(r.c, *r.model, r.env.rank / (r.env.world_size / pp));
  r.lora_layers = lora_add_adapters(r.c, *r.model, r.env.rank == 0);  // before anything reads the model's parameters
  check_inputs(r.c, *r.model, r.env.rank == 0);
  r.model->check_parallel(r.c.parallel);  // tensor parallelism must divide what it splits
  r.rank = r.env.rank;
  r.world = r.env.world_size;
  r.lead = r.rank == 0;
  if (r.world > 1) log::set_rank(r.rank);
  if (r.lead) {
    fs::create_directories(r.c.run.dir);
    std::ofstream out(r.c.run.dir + "/config.yaml");
    out << config_to_yaml(r.c);
  }
}

// The ranks as pp x dp x tp: tensor parallelism within consecutive ranks, data parallelism (the
// strategy's shard and replica groups) across them, pipeline stages outermost. Before any
// communicator: the flight recorder's ring (in the file the agent reads, if given) and where
// ranks dump it when a collective fails.
void set_up_mesh(RunSetup& r) {
  const Config& c = r.c;
  const int64_t hybrid_size = r.shard_options.strategy == Strategy::HybridShard ? hybrid_group_size(c, r.env) : 0;
  const char* recorder_file = std::getenv("CADRE_FLIGHT_RECORDER_FILE");
  obs::flight_recorder_configure(size_t(c.obs.flight_recorder_entries), recorder_file ? recorder_file : "");
  obs::flight_recorder_set_dump_dir(c.run.dir + "/flight_recorder");
  comm::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.parallel.comm_timeout * 1000));
  // Under `cadre run --recovery memory` the agents name a lost node themselves: a collective
  // that lost a peer reports it at once instead of first reading who else is late.
  if (std::getenv(rdzv::kMembershipFdEnv)) comm_options.peer_error_diagnosis = std::chrono::milliseconds(250);
  r.mesh = std::make_unique<DeviceMesh>(r.env, c.parallel.tp_size, comm_options, c.parallel.pp_size);
  r.groups = make_parallel_groups(r.mesh->dp(), r.shard_options.strategy, hybrid_size);
  r.shard_options.groups = r.groups.groups;
  r.shard_options.stage_group = r.mesh->pp();  // the global gradient norm adds every stage's
  if (r.pipeline) r.shard_options.mirrored = r.pipeline->mirrored;
  // A stage of several chunks runs each backward through one of them.
  r.shard_options.partial_backward = r.pipeline && r.pipeline->chunks > 1;
  if (r.pipeline) {
    pipeline_connect(*r.pipeline, *r.mesh);
    if (r.mesh->dp_rank() == 0 && r.mesh->tp_rank() == 0) log::info(str("train: ", r.pipeline->describe()));
  }
  r.group = r.mesh->world();
  r.dp = r.mesh->dp_size();
  r.dp_rank = r.mesh->dp_rank();
}

// A deferred model (built without storage) is made in shards: parallelize splits it, and each
// rank allocates its shard on the training device and fills it from the source, its own
// elements only: train.init_from's Hugging Face folder or checkpoint, or the model's counter-based
// initialisation (the same bits at any world size, strategy and tp size). Nothing is broadcast.
void set_up_deferred(RunSetup& r) {
  BaseParamSource base = base_param_source(r.c, *r.model);
  r.param_source = base.source;
  r.hf_source = base.hf;
  r.checkpoint_source = base.checkpoint;
  if (!r.c.lora.init_from.empty())  // the adapters' initial values over the base's
    r.param_source = lora_init_from_source(r.param_source, r.c, *r.model);
  else if (!r.lora_layers.empty())
    r.param_source = lora_init_source(r.param_source, r.model->module(), static_cast<uint64_t>(r.c.train.seed));
  r.shard_options.param_source = r.param_source;
  r.shard_options.device = r.device;
}

// A model that initialises itself whole: every rank from the same seed on the CPU (the same
// values whatever the device, so a GPU run starts where a CPU run does); broadcasting makes
// equality a guarantee. It then moves to the training device, so that flat shards, gradients
// and optimizer state are made there.
void initialise_whole(RunSetup& r) {
  r.model->init_weights(static_cast<uint64_t>(r.c.train.seed));
  lora_init_adapters(r.model->module(), static_cast<uint64_t>(r.c.train.seed));
  if (r.group) {
    c10::NoGradGuard no_grad;
    for (auto& p : r.model->module().parameters()) r.group->broadcast(p, 0);
    for (auto& b : r.model->module().buffers()) r.group->broadcast(b, 0);
  }
  if (!r.device.is_cpu()) r.model->module().to(r.device);
}

// Tensor parallelism over the mesh's tp ranks and FSDP units over the dp ranks (NO_SHARD is
// DDP: the same flat buffers, reduced in buckets), the shards made at once (and timed). The
// optimizer sees only this rank's float32 shard, so its state shrinks with the data-parallel
// size; a run that only loads (train.steps 0) makes none.
void set_up_model(RunSetup& r) {
  const Config& c = r.c;
  if (r.model->deferred()) set_up_deferred(r);
  else initialise_whole(r);
  const auto t0 = std::chrono::steady_clock::now();
  r.sharded = r.model->parallelize(*r.mesh, r.shard_options, c.parallel);
  if (!c.train.freeze.empty()) {  // before the tree is set up: frozen parameters get their own flat parameters
    const int64_t frozen = freeze_parameters(r.model->module(), c.train.freeze, c.train.steps > 0);
    if (r.lead) log::info(str("train.freeze: ", frozen, " parameters frozen (", c.train.freeze, ")"));
  }
  if (!r.lora_layers.empty()) lora_freeze_base(r.model->module());  // only the adapters train
  r.memory = check_run_memory(r);  // before the shards exist: a run that cannot fit stops here
  r.sharded.flat_params();  // the tree set up: a deferred model's shards allocated and filled
  r.model_ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.t_start).count();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.hf_source) init_from_hf_report(*r.hf_source, load_s, r.rank, r.sharded.memory().shard_size);
  if (c.train.steps == 0) return;
  r.optimizer = make_optimizer(c.optim, r.sharded.parameters(), r.sharded.decay_mask());
  r.schedule = LrSchedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.steps};
}

}  // namespace

FullyShardOptions shard_options_of(const Config& c) {
  const ParallelConfig& p = c.parallel;
  auto dtype = [](const std::string& name) { return name == "bfloat16" ? at::kBFloat16 : at::kFloat; };
  FullyShardOptions o;
  o.strategy = p.strategy;
  o.mixed_precision = {dtype(p.mixed_precision.param_dtype), dtype(p.mixed_precision.reduce_dtype)};
  o.prefetch = p.prefetch;
  o.frozen_in_compute_dtype = c.lora.rank > 0;  // a LoRA base: bf16 under bf16 compute
  return o;
}

std::unique_ptr<RunSetup> run_set_up(const Config& config, const std::optional<comm::JobEnv>& env) {
  auto r = std::make_unique<RunSetup>();
  r->t_start = std::chrono::steady_clock::now();
  set_up_inputs(*r, config, env);
  set_threads(r->c.train.threads);
  r->shard_options = shard_options_of(r->c);
  set_up_mesh(*r);
  r->rss_before_model = process_rss_bytes();
  r->anon_before_model = process_anon_rss_bytes();
  set_up_model(*r);
  if (r->c.train.steps == 0) return r;  // load only: no optimizer, no data
  r->train_data = BatchSource::open(r->c.data.dir, Split::Train, static_cast<uint64_t>(r->c.train.seed), r->c.data,
                                    r->c.train.threads, r->device);
  if (r->c.train.eval_interval > 0)
    r->val_data = BatchSource::open(r->c.data.dir, Split::Val, 0, r->c.data, r->c.train.threads, r->device);
  return r;
}

}  // namespace cadre
