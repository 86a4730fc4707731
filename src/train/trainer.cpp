// The training loop, top to bottom: check inputs, build and shard the model (whichever the
// config names: the loop only sees models/model.h), build the optimizer, resume from a
// checkpoint, then for each step run the micro-batches, clip, update, log, evaluate and
// checkpoint (in the background); wait for the last save at the end.
#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_saver.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/json_log.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/sysinfo.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "shard/memory_report.h"
#include "shard/parallel_groups.h"
#include "train/batch_source.h"
#include "train/checkpointing.h"
#include "train/resume.h"
#include "train/stop_signal.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

using Clock = std::chrono::steady_clock;

// Inputs the config points at must agree with it before any work starts (exit code 2).
// HYBRID_SHARD's shard group: parallel.shard_group_size, or the ranks of one node. It must
// divide the world, and with one node and no size given it would be FULL_SHARD in disguise.
int64_t hybrid_group_size(const Config& c, const comm::JobEnv& env) {
  int64_t size = c.parallel.shard_group_size;
  if (size == 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    size = local && *local ? std::atoll(local) : env.world_size;
    CADRE_CONFIG_CHECK(env.world_size == 1 || size < env.world_size,
                       "parallel.shard_group_size: HYBRID_SHARD needs a shard group size > 0 when all ",
                       env.world_size, " ranks are on one node (LOCAL_WORLD_SIZE=", size,
                       "); set it, or use FULL_SHARD");
  }
  CADRE_CONFIG_CHECK(size >= 1 && env.world_size % size == 0, "parallel.shard_group_size ", size,
                     " does not divide WORLD_SIZE=", env.world_size);
  return size;
}

DatasetManifest check_inputs(const Config& c, const Model& model) {
  CADRE_CONFIG_CHECK(!c.data.dir.empty(), "data.dir is not set (a directory written by `cadre data prepare`)");
  CADRE_CONFIG_CHECK(fs::is_directory(c.data.dir), "data.dir '", c.data.dir, "' is not a directory");
  DatasetManifest m = manifest_read(c.data.dir);
  try {
    model.check_data(m);
  } catch (const ConfigError& e) {
    throw ConfigError(str("data.dir '", c.data.dir, "': ", e.what()));
  }
  return m;
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

struct Evaluation {
  double loss = 0;
  double accuracy = -1;  // classifiers only
};

// Mean validation loss (and accuracy). With train.eval_batches = N > 0: over N global batches
// of the validation split (the first N * batch_size * world samples), each rank evaluating its
// slice of each, so the figure does not depend on how the batch is split across ranks. With 0:
// the whole split once, each rank a contiguous part. Collective under sharding: every rank
// runs the same number of forwards (a rank out of samples runs one and ignores it).
Evaluation evaluate(Model& model, const BatchSource& val, const Config& c, int rank, int world,
                    comm::Communicator* group) {
  at::NoGradGuard no_grad;
  model.module().train(false);
  const uint64_t B = static_cast<uint64_t>(c.data.batch_size), W = static_cast<uint64_t>(world);
  const uint64_t N = val.num_samples(), r = static_cast<uint64_t>(rank);
  std::vector<std::vector<uint64_t>> batches;
  if (c.train.eval_batches > 0) {
    for (int64_t b = 0; b < c.train.eval_batches; ++b) {
      std::vector<uint64_t> indices;
      for (uint64_t i = 0; i < B; ++i) indices.push_back((b * B * W + r * B + i) % N);
      batches.push_back(indices);
    }
  } else {
    const uint64_t lo = N * r / W, hi = N * (r + 1) / W, per_rank = (N + W - 1) / W;
    for (uint64_t start = lo; batches.size() < (per_rank + B - 1) / B; start += B) {
      std::vector<uint64_t> indices;
      for (uint64_t i = start; i < std::min(hi, start + B); ++i) indices.push_back(i);
      batches.push_back(indices);
    }
  }
  double total = 0, correct = 0, count = 0;
  for (const auto& indices : batches) {
    LossOutput out = model.loss(val.at(indices.empty() ? std::vector<uint64_t>{0} : indices));
    if (indices.empty()) continue;
    const double n = double(indices.size());
    total += out.loss.item<double>() * n;
    correct += double(out.correct);
    count += n;
  }
  model.module().train(true);
  if (group) {
    at::Tensor sums = at::empty({3}, at::kDouble);
    sums[0] = total;
    sums[1] = correct;
    sums[2] = count;
    at::Tensor f = sums.to(at::kFloat);  // the communicator reduces float32
    group->all_reduce(f, comm::ReduceOp::Sum);
    total = f[0].item<double>();
    correct = f[1].item<double>();
    count = f[2].item<double>();
  }
  Evaluation e;
  e.loss = total / count;
  if (correct >= 0) e.accuracy = correct / count;
  return e;
}

// After a resume, metrics.jsonl keeps the records up to the resumed step: steps the crashed
// run did after its last checkpoint are done again and logged again.
void metrics_truncate(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.value("step", int64_t{0}) > step) continue;
    kept += line + "\n";
  }
  file_write_atomic(path, kept);
}

}  // namespace

TrainSummary train_run(const Config& config) {
  // --- inputs and run directory ---------------------------------------------------------
  Config c = config;
  model_config_resolve(c);  // the model's keys, checked and complete in config.yaml
  const comm::JobEnv env = comm::JobEnv::from_env();
  std::unique_ptr<Model> model = model_build(c);
  DatasetManifest manifest = check_inputs(c, *model);
  const int rank = env.rank, world = env.world_size;
  const bool lead = rank == 0;  // rank 0 writes the run directory and shows progress
  if (world > 1) log::set_rank(rank);
  if (lead) {
    fs::create_directories(c.run.dir);
    std::ofstream out(c.run.dir + "/config.yaml");
    out << config_to_yaml(c);
  }
  set_threads(c.train.threads);
  auto dtype = [](const std::string& name) { return name == "bfloat16" ? at::kBFloat16 : at::kFloat; };
  FullyShardOptions shard_options;
  shard_options.strategy = parse_strategy(c.parallel.strategy);
  shard_options.mixed_precision = {dtype(c.parallel.mixed_precision.param_dtype),
                                   dtype(c.parallel.mixed_precision.reduce_dtype)};
  shard_options.prefetch = c.parallel.prefetch;
  const int64_t hybrid_size =
      shard_options.strategy == Strategy::HybridShard ? hybrid_group_size(c, env) : 0;
  comm::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.parallel.comm_timeout * 1000));
  ParallelGroups groups = make_parallel_groups(env, shard_options.strategy, hybrid_size, comm_options);
  shard_options.groups = groups.groups;
  comm::Communicator* group = groups.world.get();

  // --- model, optimizer, data -------------------------------------------------------------
  model->init_weights(static_cast<uint64_t>(c.train.seed));
  if (group) {
    // Every rank initialises from the same seed; broadcasting makes equality a guarantee.
    at::NoGradGuard no_grad;
    for (auto& p : model->module().parameters()) group->broadcast(p, 0);
    for (auto& b : model->module().buffers()) group->broadcast(b, 0);
  }
  // FSDP units over the model (NO_SHARD is DDP: the same flat buffers, reduced in buckets).
  // The optimizer sees only this rank's float32 shard, so its state shrinks with the world size.
  FSDPModule sharded = model->parallelize(shard_options, c.parallel);
  AdamW optimizer(sharded.parameters(), sharded.decay_mask(),
                  {c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay});
  LrSchedule schedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.steps};

  std::unique_ptr<BatchSource> train_data = BatchSource::open(c.data.dir, Split::Train, static_cast<uint64_t>(c.train.seed));
  std::unique_ptr<BatchSource> val_data;
  if (c.train.eval_interval > 0) val_data = BatchSource::open(c.data.dir, Split::Val, 0);

  // --- checkpoints: resume, then a saver with its own communicator ---------------------------
  const std::string checkpoint_dir = c.checkpoint.dir.empty() ? c.run.dir + "/checkpoints" : c.checkpoint.dir;
  Resumed resumed = resume_training(c, checkpoint_dir, sharded, optimizer, *train_data, rank, group);
  std::unique_ptr<comm::Communicator> checkpoint_group;
  if (group) {
    // Saves agree from a background thread: a communicator of their own keeps those
    // collectives out of training's order. A rank waits there while its slowest peer still
    // writes its part, hence a timeout of its own.
    std::vector<int> all(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) all[r] = r;
    comm::CommOptions options = group->options();
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.checkpoint.timeout_s * 1000));
    checkpoint_group = group->subgroup(all, "checkpoint", &options);
  }
  CheckpointSaver saver({checkpoint_dir, rank, world, c.checkpoint.keep, c.checkpoint.async},
                        [g = checkpoint_group.get()](bool ok) { return comm::all_ranks_agree(g, ok); });
  const int64_t end_step = c.train.stop_at > 0 ? c.train.stop_at : c.train.steps;
  auto checkpoint_due = [&](int64_t done) {
    return done == end_step || (c.checkpoint.interval > 0 && done % c.checkpoint.interval == 0);
  };

  TrainSummary summary;
  summary.run_dir = c.run.dir;
  summary.lead = lead;
  summary.resumed_from = resumed.path;
  summary.throughput_unit = model->throughput_unit();
  if (resumed.step >= end_step) {
    // E.g. a restart after the last checkpoint was written: done is done.
    if (lead) log::info(str("train: the run is already at step ", resumed.step, "; nothing to train"));
    summary.steps = resumed.step;
    summary.checkpoint = resumed.path;
    summary.nothing_to_train = true;
    if (group) group->barrier();
    return summary;
  }

  const int64_t B = c.data.batch_size, accum = c.optim.grad_accum_steps;
  const int64_t samples_per_step = B * accum * world;
  const int64_t units_per_step = samples_per_step * train_data->sample_len();
  const std::string unit = model->throughput_unit();
  log::info(str("train: ", model->describe(), ", ", c.parallel.strategy, ", compute ",
                c.parallel.mixed_precision.param_dtype, ", ", world, " rank(s) x ", c.train.threads, " threads; ",
                train_data->num_samples(), " train samples; ", units_per_step, " ", unit, " per step"));

  std::unique_ptr<JsonLog> metrics;
  if (lead) {
    if (resumed.step > 0) metrics_truncate(c.run.dir + "/metrics.jsonl", resumed.step);
    metrics = std::make_unique<JsonLog>(c.run.dir + "/metrics.jsonl", /*append=*/resumed.step > 0);
  }
  std::vector<double> rates;
  std::unique_ptr<Progress> progress;
  if (lead) progress = std::make_unique<Progress>("train: step", end_step, "step", 0.5, resumed.step);
  std::string progress_text;
  StopSignal stop_signal;
  int stopping = 0;  // the signal every rank agreed to stop on

  // --- the loop ---------------------------------------------------------------------------
  for (int64_t step = resumed.step; step < end_step && !stopping; ++step) {
    auto t0 = Clock::now();
    sharded.zero_grad();
    double loss_sum = 0, correct = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      // Each rank takes its slice of the global micro-batch; together they read what one
      // rank with world * B samples would.
      Batch batch = train_data->next(static_cast<uint64_t>(B * world), static_cast<uint64_t>(rank * B),
                                     static_cast<uint64_t>(B));
      // Gradients are reduced across ranks only in the last micro-batch's backward.
      std::optional<FSDPModule::NoSyncGuard> accumulate;
      if (micro + 1 < accum) accumulate.emplace(&sharded.tree());
      LossOutput out = model->loss(batch);
      (out.loss / double(accum)).backward();
      loss_sum += out.loss.item<double>();
      correct += double(out.correct);
    }
    stopping = stop_signal.received();
    if (group) {
      // The loss, for the log, is the mean over ranks; a stop signal on any rank rides along,
      // so all ranks stop after the same step at no extra cost.
      at::Tensor l = at::empty({3}, at::kFloat);
      l[0] = loss_sum;
      l[1] = stopping;
      l[2] = correct;
      group->all_reduce(l, comm::ReduceOp::Avg);
      loss_sum = l[0].item<double>();
      if (l[1].item<double>() > 0 && !stopping) stopping = SIGTERM;  // another rank's
      correct = l[2].item<double>() * world;
    }
    double grad_norm = sharded.clip_grad_norm(c.optim.grad_clip);
    double lr = schedule.at(step);
    optimizer.step(lr);
    sharded.mark_updated();

    double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double loss = loss_sum / double(accum);
    CADRE_CHECK(std::isfinite(loss), "step ", step + 1, ": loss is ", loss, " (diverged; lower optim.lr?)");
    double rate = units_per_step / step_s;
    if (step > resumed.step) rates.push_back(rate);
    nlohmann::json record = {{"step", step + 1},        {"loss", loss},        {"lr", lr},
                             {"grad_norm", grad_norm},  {unit + "_per_s", rate}, {"step_time_s", step_s},
                             {"rss_bytes", process_rss_bytes()}};
    if (correct >= 0) record["accuracy"] = correct / double(samples_per_step);
    summary.final_loss = loss;

    bool last = step + 1 == end_step;
    if (val_data && ((step + 1) % c.train.eval_interval == 0 || last)) {
      Evaluation e = evaluate(*model, *val_data, c, rank, world, group);
      record["val_loss"] = e.loss;
      summary.final_val_loss = e.loss;
      if (e.accuracy >= 0) {
        record["val_accuracy"] = e.accuracy;
        summary.final_val_accuracy = e.accuracy;
      }
      if (lead)
        log::info(e.accuracy >= 0 ? str("train: step ", step + 1, " val_loss ", e.loss, " val_accuracy ", e.accuracy)
                                  : str("train: step ", step + 1, " val_loss ", e.loss));
    }
    if (checkpoint_due(step + 1) || stopping) {
      // Staging copies this rank's part (waiting first if the previous save still runs);
      // the writing happens in the background.
      auto t_stage = Clock::now();
      Snapshot& snapshot = saver.stage();
      stage_train_state(snapshot, sharded, optimizer, rank);
      CheckpointManifest header;
      header.step = step + 1;
      header.world_size = world;
      header.strategy = c.parallel.strategy;
      header.state = {{"data_position", static_cast<int64_t>(train_data->position())},
                      {"optimizer_steps", optimizer.steps()}};
      header.config_yaml = config_to_yaml(c);
      saver.submit(std::move(header));
      record["checkpoint_stage_s"] = std::chrono::duration<double>(Clock::now() - t_stage).count();
      record["checkpoint_wait_s"] = saver.last_stage_wait_s();
    }
    saver.check();  // a failed background save stops training here, on every rank
    if (metrics) metrics->write(record);
    // The progress line redraws at most twice a second; its numbers refresh every log_interval.
    if ((step + 1) % c.train.log_interval == 0 || step == 0) {
      char line[160];
      std::snprintf(line, sizeof line, "loss %.4f lr %.2e gnorm %.3f %.0f %s/s", loss, lr, grad_norm, rate,
                    unit.c_str());
      progress_text = line;
    }
    if (progress && !last) progress->update(step + 1, progress_text);
  }
  saver.wait();
  const SaveStats saved = saver.last_stats();
  if (stopping) {
    progress.reset();  // clears the line; the log line below says where training stopped
    if (lead)
      log::info(str("train: stopped after step ", saved.step, " on signal ", stopping, "; checkpoint ", checkpoint_dir, "/",
                    checkpoint_name(saved.step), " holds it (resume with --resume auto)"));
    summary.steps = saved.step;
    summary.checkpoint = checkpoint_dir + "/" + checkpoint_name(saved.step);
    summary.stopped_by_signal = stopping;
    if (group) group->barrier();  // rank 0 hosts the store: leave together
    return summary;
  }
  if (lead && saved.step > 0)
    log::info(str("checkpoint: step ", saved.step, " saved in ", checkpoint_dir, "/", checkpoint_name(saved.step), " (",
                  saved.bytes / 1e6, " MB from this rank, written in ", saved.write_s, " s)"));
  std::sort(rates.begin(), rates.end());
  summary.throughput = rates.empty() ? 0 : rates[rates.size() / 2];
  summary.steps = end_step;
  summary.checkpoint = saved.step > 0 ? checkpoint_dir + "/" + checkpoint_name(saved.step) : "";
  {
    char line[160];
    std::snprintf(line, sizeof line, "loss %.4f, median %.0f %s/s", summary.final_loss, summary.throughput,
                  unit.c_str());
    if (progress) progress->finish(line);
  }
  // --- memory and, as a diagnostic, agreement across ranks (collective) ----------------------
  int64_t optimizer_bytes = 0;
  for (const auto& t : optimizer.exp_avg()) optimizer_bytes += t.numel() * 4;
  for (const auto& t : optimizer.exp_avg_sq()) optimizer_bytes += t.numel() * 4;
  const bool resident_copy = shard_options.strategy == Strategy::NoShard &&
                             shard_options.mixed_precision.param_dtype != at::kFloat;
  MemoryReport memory = memory_report(sharded.memory(), optimizer_bytes, resident_copy, 2);
  if (lead) log::info("train: " + memory.to_text());
  // Never the whole model on a rank: the check gathers one unit at a time, and only on request.
  std::optional<bool> identical;
  if (c.train.check_replicas) {
    identical = sharded.replicas_identical();
    CADRE_CHECK(*identical, "rank ", rank, ": after training the parameters differ across ranks");
  }
  if (!lead) {
    summary.lead = false;
    group->barrier();  // rank 0 hosts the store: leave only after everyone is done with it
    return summary;
  }

  nlohmann::json s = {{"steps", summary.steps},
                      {"resumed_from", resumed.path},
                      {"resumed_step", resumed.step},
                      {"checkpoint", summary.checkpoint},
                      {"world_size", world},
                      {"final_loss", summary.final_loss},
                      {"final_val_loss", summary.final_val_loss},
                      {unit + "_per_s", summary.throughput},
                      {"params", model->param_count()},
                      {"arch", c.model.arch},
                      {"strategy", c.parallel.strategy},
                      {"memory", memory.to_json()},
                      {"peak_rss_bytes", process_peak_rss_bytes()}};
  if (summary.final_val_accuracy >= 0) s["final_val_accuracy"] = summary.final_val_accuracy;
  if (identical) s["params_identical_across_ranks"] = *identical;
  std::ofstream(c.run.dir + "/summary.json") << s.dump(2) << "\n";
  if (group) group->barrier();
  return summary;
}

}  // namespace cadre
