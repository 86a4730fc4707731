// The training configuration: one struct per YAML section, loaded from a file and then
// overridden key by key (`--set section.key=value`). Unknown keys and wrong types are errors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config_fields.h"
#include "core/strategy.h"

namespace cadre {

// The model section: `arch` picks the model; every other key belongs to that model, which
// parses, validates and fills in its defaults (models/registry.h: model_config_resolve).
// Core knows no model.
struct ModelSection {
  std::string arch = "llama";
  std::vector<RawKey> keys;  // "model.dim" = "64", ...: in file order, --set overrides replace
  // The value of `model.<name>` as written ("" when absent).
  std::string value(const std::string& name) const;
};

struct DataConfig {
  std::string dir;              // output of `cadre data prepare` (holds manifest.json)
  int64_t batch_size = 8;       // micro-batch per rank; global = batch_size * world * grad_accum
  // Encoded images (an ImageFolder prepared by `cadre data prepare --images`): decoded and
  // augmented at load time (data/encoded_image_loader.h).
  int64_t workers = 0;          // decode threads per rank; 0: the cores per rank left beside train.threads (at least 1)
  int64_t prefetch = 2;         // global batches decoded ahead
  int64_t image_size = 224;     // side of the crop the model sees
  int64_t resize_size = 256;    // validation: shorter side before the centre crop
  double crop_scale_min = 0.08; // RandomResizedCrop's area range [min, 1]
  std::string mean = "0.485,0.456,0.406";  // per-channel normalisation (RGB), of pixels in [0, 1]
  std::string stddev = "0.229,0.224,0.225";  // key data.std
  bool uint8 = false;           // ship bytes and normalise after the batch leaves the loader (on the device)
  int64_t shuffle_window = 4096;  // samples shuffled together after the shard permutation
  // Instruction data (`cadre data prepare` of .jsonl): learn the prompt tokens too, not only
  // the answers (padding is never learned).
  bool train_on_prompt = false;
};

struct OptimConfig {
  std::string name = "adamw";   // adamw | sgd (optim/make_optimizer.h)
  double lr = 3e-4;
  double min_lr = 3e-5;         // cosine decays to this
  int64_t warmup_steps = 100;
  // adamw: decoupled (p -= lr * wd * p); sgd: L2, added to the gradient as torch.optim.SGD.
  double weight_decay = 0.1;
  // Parameters weight decay skips: norm_and_bias (those with fewer than 2 dimensions: norm
  // scales and shifts, biases) | none (every parameter decays, torch.optim's default).
  std::string no_decay = "norm_and_bias";
  double beta1 = 0.9;           // adamw only, as beta2 and eps
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0;          // sgd only, as dampening and nesterov (torch.optim.SGD's defaults)
  double dampening = 0;
  bool nesterov = false;
  double grad_clip = 1.0;       // max global gradient norm; 0 disables clipping
  int64_t grad_accum_steps = 1;
};

struct TrainConfig {
  int64_t steps = 1000;        // 0: set up and load the model, report memory per rank, stop
  // Size the run from the data instead: steps = ceil(epochs x train samples / global batch),
  // worked out when the run starts (train/epochs.h). Exclusive with steps: a source (the file,
  // or the --set overrides) that sets both is refused; a later source's one wins.
  int64_t epochs = 0;
  int64_t seed = 1234;
  int64_t threads = 2;          // intra-op threads per process
  // cpu | cuda | auto (cuda when this build has CUDA and a GPU is visible, else cpu). Under
  // `cadre run` the GPU is LOCAL_RANK's (core/device.h).
  std::string device = "cpu";
  int64_t log_interval = 10;
  int64_t eval_interval = 100;  // 0 disables validation
  int64_t eval_batches = 8;     // global batches per evaluation; 0: the whole validation split
  // Stop after this step as if interrupted (a checkpoint is written); the LR schedule still
  // spans `steps`. 0: run to `steps`.
  int64_t stop_at = 0;
  // Diagnostic: after training, check that every rank holds the same parameters (gathers one
  // unit at a time). Off in production runs.
  bool check_replicas = false;
  // Fine-tuning: a checkpoint (or run / checkpoint directory) whose model.* weights a fresh
  // run starts from, at step 0 with a fresh optimizer (e.g. one `cadre ckpt import` wrote).
  // Model keys the config leaves out are taken from that checkpoint's config. Ignored when
  // the run resumes from a checkpoint of its own.
  std::string init_from;
  // The memory each rank may use ("24GiB", "512MiB", bytes; "" or 0: no limit but the memory
  // cgroup the process is in). A run whose estimate (train/memory_estimate.h) exceeds the
  // limit stops before allocating, with the breakdown and exit code 2.
  std::string memory_limit;
  // Parameters that do not train: those whose names this regular expression (ECMAScript,
  // searched, as std::regex_search) matches, e.g. "^(tok_embeddings|layers\\.[0-7]\\.)" for the
  // embedding and the first eight blocks (llama-recipes' freeze_layers). They are sharded like
  // the others, with no gradient and no optimizer state. "" (the default): all train.
  std::string freeze;
};

// LoRA (Hu et al. 2021, as PEFT's LoraConfig; models/lora.h): low-rank adapters beside chosen
// linear layers, y = x W^T + alpha / rank * (dropout(x) A^T) B^T. With rank > 0 every other
// parameter is frozen: the base is sharded like any frozen parameter (no gradient, no optimizer
// state) and only the adapters train.
struct LoraConfig {
  int64_t rank = 0;     // 0: no adapters
  double alpha = 16;    // scale = alpha / rank
  double dropout = 0;   // on the adapter's input, in training only (PEFT's lora_dropout)
  // Comma-separated: the model's layer names or PEFT's target_modules names (q_proj, ...; each
  // matches a layer whose name is it or ends in ".<it>"), `all-linear` (every linear layer but
  // the output head, as PEFT), or a regular expression full-matching layer names (an entry with
  // characters other than letters, digits, '_', '-' and '.'). "": the model's default (Llama: the
  // attention projections wq, wk, wv, wo).
  std::string targets;
  // A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors, as peft saves one
  // and `cadre ckpt export --format peft` writes) to start the adapters from: its r, lora_alpha,
  // lora_dropout and adapted layers become the run's (train/lora_import.h).
  std::string init_from;
};

struct MixedPrecisionConfig {
  std::string param_dtype = "float32";   // float32 | bfloat16: dtype of compute weights
  std::string reduce_dtype = "float32";  // float32 | bfloat16: dtype of gradient reduction
};

struct ParallelConfig {
  // Over the data-parallel dimension: FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD |
  // ZERO1 (parameters and gradients replicated, optimizer state sharded). Parsed from its
  // name as the config is read (core/strategy.h).
  Strategy strategy = Strategy::NoShard;
  int64_t shard_group_size = 0;          // HYBRID_SHARD: data-parallel ranks per shard group (0: per node)
  // Tensor-parallel ranks per model replica (consecutive ranks, so inside a node); the data
  // parallel dimension is WORLD_SIZE / tp_size. 1: no tensor parallelism.
  int64_t tp_size = 1;
  // Pipeline parallelism (pipeline/): stages per model replica, each holding a contiguous run of
  // the model's blocks (the first also the embedding, the last the norm, head and loss). The
  // mesh is pp x dp x tp, pp outermost (stages across nodes, tensor parallelism inside one);
  // data parallelism runs over WORLD_SIZE / (pp_size * tp_size). 1: no pipeline.
  int64_t pp_size = 1;
  // gpipe | 1f1b | interleaved (case-insensitive; pipeline/schedule.h).
  std::string pp_schedule = "1f1b";
  // Micro-batches each step's pipeline runs: a divisor of optim.grad_accum_steps, each pipeline
  // micro-batch that many data micro-batches side by side (the global batch does not change). 0:
  // optim.grad_accum_steps.
  int64_t pp_microbatches = 0;
  // Model chunks per stage (interleaved: stage s holds virtual stages s, s + pp_size, ...). 0 (the
  // default): 2 under interleaved, 1 under the other schedules.
  int64_t pp_chunks = 0;
  // Blocks per virtual stage, "4,4,3,3"; "" (the default): balanced by parameter count.
  std::string pp_split;
  MixedPrecisionConfig mixed_precision;
  bool activation_checkpointing = false;
  bool prefetch = true;
  // Gradient accumulation under a sharding strategy (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD):
  // false (as FSDP2 by default) reduce-scatters each micro-batch's gradients into the float32
  // shard, so no rank ever keeps a whole gradient; true keeps each unit's whole gradient across
  // the micro-batches and reduces once per step (fewer collectives, +4 bytes per parameter per
  // rank, which `cadre train` prints). NO_SHARD and ZERO1 keep whole gradients anyway and reduce
  // once per step.
  bool accumulate_unsharded = false;
  // FSDP wrap policy: 0 makes each transformer block a unit (by module type); N > 0 groups
  // consecutive blocks into units of at least N parameters (by parameter count).
  int64_t wrap_min_params = 0;
  // Seconds a collective may wait for a peer before failing (a dead or partitioned rank). Keep it
  // above the launcher's heartbeat_timeout so a lost node is handled as a membership change.
  double comm_timeout = 60;
};

struct CheckpointConfig {
  int64_t interval = 0;         // steps between checkpoints; 0: only at the end
  int64_t keep = 3;             // complete checkpoints kept; older ones are deleted
  std::string dir;              // default: <run.dir>/checkpoints
  // auto: the newest complete checkpoint, or a fresh start when there is none (so a worker
  // the launcher restarts goes on where the job was); none: start fresh, refused when the
  // directory already holds checkpoints; else the path of a checkpoint.
  std::string resume = "auto";
  bool async = true;            // write in a background thread while training goes on
  // Save at the run's last step (false: only every `interval` steps, and on a stop by signal;
  // a fixed-length measurement, as `make gpu-check`'s large model, saves nothing it will not read).
  bool at_end = true;
  // How long ranks wait for each other to finish writing their parts of one checkpoint.
  double timeout_s = 600;
  // `cadre run --recovery memory` with sharded state: steps between the copies each rank keeps of
  // its part in the memory of a rank on another node (train/peer_copies.h); losing a node costs
  // at most this many steps.
  int64_t memory_interval = 10;
};

// What a run reports besides metrics.jsonl (obs/: the agent's /metrics, stragglers, hangs).
struct ObsConfig {
  bool metrics = true;                     // report each step to `cadre run`'s agent, when it listens
  int64_t flight_recorder_entries = 2000;  // collectives each rank remembers; 0 turns the recorder off
  double straggler_factor = 1.5;           // busy time over the median rank's; 0 turns tracking off
  int64_t straggler_steps = 5;             // slow steps in a row before a rank is named
};

struct RunConfig {
  std::string dir = "runs/default";
};

struct Config {
  ModelSection model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  ParallelConfig parallel;
  LoraConfig lora;
  CheckpointConfig checkpoint;
  ObsConfig obs;
  RunConfig run;
  // `deploy:` keys as written (scalar text), for `cadre deploy`, which owns, checks and
  // documents them (src/deploy/job_spec.cpp); training ignores them, so one file serves both.
  std::map<std::string, std::string> deploy;
};

// Loads `path` (YAML), then applies `overrides` ("section.key=value", value parsed as YAML).
// Throws ConfigError naming the file and key on unknown keys, bad types or invalid values.
// The model's own keys are kept as written: model_config_resolve checks them.
Config config_load(const std::string& path, const std::vector<std::string>& overrides);

// Same, from YAML text (tests); `source` names it in errors.
Config config_parse(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides);

// Checks cross-field rules (shard_group_size only with HYBRID_SHARD, ...). Throws ConfigError.
// The strategy is checked earlier, when its name is parsed.
void config_validate(const Config& config);

// The resolved configuration as YAML, every key present.
std::string config_to_yaml(const Config& config);

}  // namespace cadre
