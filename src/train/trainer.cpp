// The training loop, top to bottom: check inputs, lay the ranks out as a dp x tp mesh, build
// and parallelize the model (whichever the config names: the loop only sees models/model.h;
// tensor parallelism over tp, FSDP or ZeRO-1 over dp), build the optimizer, resume from a
// checkpoint, then for each step run the micro-batches, clip, update, log, evaluate and
// checkpoint (in the background); wait for the last save at the end.
#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

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
#include "core/strategy.h"
#include "core/sysinfo.h"
#include "models/registry.h"
#include "obs/flight_recorder.h"
#include "obs/train_observer.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "shard/device_mesh.h"
#include "shard/memory_report.h"
#include "shard/parallel_groups.h"
#include "train/batch_source.h"
#include "train/checkpointing.h"
#include "train/init_from.h"
#include "train/resume.h"
#include "train/stop_signal.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

using Clock = std::chrono::steady_clock;

// Inputs the config points at must agree with it before any work starts (exit code 2).
// HYBRID_SHARD's shard group, in data-parallel ranks: parallel.shard_group_size, or the
// data-parallel ranks of one node. It must divide the data-parallel size, and with one node
// and no size given it would be FULL_SHARD in disguise.
int64_t hybrid_group_size(const Config& c, const comm::JobEnv& env) {
  const int64_t tp = c.parallel.tp_size, dp = env.world_size / tp;
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
// of the validation split (the first N * batch_size * dp samples), each data-parallel rank
// evaluating its slice of each (tensor-parallel ranks the same slice, together), so the figure
// does not depend on how the batch is split across ranks. With 0: the whole split once, each
// data-parallel rank a contiguous part. Collective under sharding: every rank runs the same
// number of forwards (a rank out of samples runs one and ignores it). `rank` and `world` are
// the data-parallel rank and size, `group` the data-parallel ranks.
Evaluation evaluate(Model& model, const BatchSource& val, const Config& c, int rank, int world,
                    comm::Communicator* group) {
  c10::NoGradGuard no_grad;
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
  init_from_config(c);      // fine-tuning: model keys the config leaves out come from the checkpoint
  model_config_resolve(c);  // the model's keys, checked and complete in config.yaml
  const comm::JobEnv env = comm::JobEnv::from_env();
  std::unique_ptr<Model> model = model_build(c);
  DatasetManifest manifest = check_inputs(c, *model);
  CADRE_CONFIG_CHECK(env.world_size % c.parallel.tp_size == 0, "parallel.tp_size ", c.parallel.tp_size,
                     " does not divide WORLD_SIZE=", env.world_size, " (data parallelism runs over WORLD_SIZE / tp_size)");
  model->check_parallel(c.parallel);  // tensor parallelism must divide what it splits
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
  shard_options.strategy = c.parallel.strategy;
  shard_options.mixed_precision = {dtype(c.parallel.mixed_precision.param_dtype),
                                   dtype(c.parallel.mixed_precision.reduce_dtype)};
  shard_options.prefetch = c.parallel.prefetch;
  const int64_t hybrid_size =
      shard_options.strategy == Strategy::HybridShard ? hybrid_group_size(c, env) : 0;
  // Before any communicator: the flight recorder's ring (in the file the agent reads, if given)
  // and where ranks dump it when a collective fails.
  const char* recorder_file = std::getenv("CADRE_FLIGHT_RECORDER_FILE");
  obs::flight_recorder_configure(size_t(c.obs.flight_recorder_entries), recorder_file ? recorder_file : "");
  obs::flight_recorder_set_dump_dir(c.run.dir + "/flight_recorder");
  comm::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.parallel.comm_timeout * 1000));
  // The ranks as dp x tp: tensor parallelism within consecutive ranks, data parallelism (the
  // strategy's shard and replica groups) across them.
  DeviceMesh mesh(env, c.parallel.tp_size, comm_options);
  ParallelGroups groups = make_parallel_groups(mesh.dp(), shard_options.strategy, hybrid_size);
  shard_options.groups = groups.groups;
  comm::Communicator* group = mesh.world();
  const int dp = mesh.dp_size(), dp_rank = mesh.dp_rank();

  // --- model, optimizer, data -------------------------------------------------------------
  model->init_weights(static_cast<uint64_t>(c.train.seed));
  if (group) {
    // Every rank initialises from the same seed; broadcasting makes equality a guarantee.
    c10::NoGradGuard no_grad;
    for (auto& p : model->module().parameters()) group->broadcast(p, 0);
    for (auto& b : model->module().buffers()) group->broadcast(b, 0);
  }
  // Tensor parallelism over the mesh's tp ranks, then FSDP units over the dp ranks (NO_SHARD is
  // DDP: the same flat buffers, reduced in buckets). The optimizer sees only this rank's
  // float32 shard, so its state shrinks with the data-parallel size.
  FSDPModule sharded = model->parallelize(mesh, shard_options, c.parallel);
  AdamW optimizer(sharded.parameters(), sharded.decay_mask(),
                  {c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay});
  LrSchedule schedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.steps};

  std::unique_ptr<BatchSource> train_data = BatchSource::open(c.data.dir, Split::Train, static_cast<uint64_t>(c.train.seed));
  std::unique_ptr<BatchSource> val_data;
  if (c.train.eval_interval > 0) val_data = BatchSource::open(c.data.dir, Split::Val, 0);

  // --- checkpoints: resume, then a saver with its own communicator ---------------------------
  const std::string checkpoint_dir = c.checkpoint.dir.empty() ? c.run.dir + "/checkpoints" : c.checkpoint.dir;
  Resumed resumed = resume_training(c, checkpoint_dir, sharded, optimizer, *train_data, rank, group);
  // A fine-tuning run starts from train.init_from; once it has checkpoints of its own, a
  // restart resumes from those instead.
  std::string initialised_from;
  if (resumed.path.empty() && !c.train.init_from.empty())
    initialised_from = init_from_load(c, sharded, rank, group);
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

  const int64_t B = c.data.batch_size, accum = c.optim.grad_accum_steps;
  obs::TrainObserver observer(obs::train_observer_options(c, rank, world, model->throughput_unit(), double(B * accum),
                                                         double(B * accum * train_data->sample_len())));
  int64_t shard_numel = 0;
  for (const auto& p : sharded.parameters()) shard_numel += p.numel();
  const ShardMemory shard_memory = sharded.memory();
  observer.set_model_state_bytes(shard_memory.params + shard_memory.grads + 8 * shard_numel);  // + AdamW moments
  observer.started(resumed.step, resumed.path, resumed.load_s, resumed.path.empty() ? 0 : 12 * shard_numel);

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

  const int64_t samples_per_step = B * accum * dp;
  const int64_t units_per_step = samples_per_step * train_data->sample_len();
  const std::string unit = model->throughput_unit();
  log::info(str("train: ", model->describe(), ", ", strategy_name(c.parallel.strategy), ", compute ",
                c.parallel.mixed_precision.param_dtype, ", ", world, " rank(s) (", mesh.describe(), ") x ",
                c.train.threads, " threads; ",
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
  obs::StepTimer timer;  // compute / communication wait / data wait

  // --- the loop ---------------------------------------------------------------------------
  for (int64_t step = resumed.step; step < end_step && !stopping; ++step) {
    timer.start();
    sharded.zero_grad();
    double loss_sum = 0, correct = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      // Each data-parallel rank takes its slice of the global micro-batch (tensor-parallel
      // ranks the same one); together they read what one rank with dp * B samples would.
      Batch batch = timer.data([&] {
        return train_data->next(static_cast<uint64_t>(B * dp), static_cast<uint64_t>(dp_rank * B),
                                static_cast<uint64_t>(B));
      });
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
      // The loss, for the log, is the mean over ranks (tensor-parallel ranks hold the same
      // one); a stop signal on any rank rides along, so all ranks stop after the same step at
      // no extra cost, and so do every rank's compute and wait times so far (straggler
      // attribution).
      at::Tensor l = at::empty({3 + int64_t(observer.gather_slots())}, at::kFloat);
      float* v = l.data_ptr<float>();
      v[0] = float(loss_sum);
      v[1] = float(stopping);
      v[2] = float(correct);
      observer.fill_slots(v + 3, timer.split());
      group->all_reduce(l, comm::ReduceOp::Sum);
      loss_sum = double(v[0] / float(world));  // rounded as an averaging all-reduce rounds it
      if (v[1] > 0 && !stopping) stopping = SIGTERM;  // another rank's
      correct = double(v[2]) / double(mesh.tp_size());  // each tensor-parallel rank counted the same samples
      observer.read_slots(step + 1, v + 3);
    }
    double grad_norm = sharded.clip_grad_norm(c.optim.grad_clip);
    double lr = schedule.at(step);
    optimizer.step(lr);
    sharded.mark_updated();

    const obs::StepSplit split = timer.split();
    double step_s = split.total_s;
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
      Evaluation e = evaluate(*model, *val_data, c, dp_rank, dp, mesh.dp());
      record["val_loss"] = e.loss;
      observer.validated(e.loss);
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
      const std::string strategy = strategy_name(c.parallel.strategy);
      header.strategy = c.parallel.tp_size > 1 ? str(strategy, ", tp ", c.parallel.tp_size) : strategy;
      header.state = {{"data_position", static_cast<int64_t>(train_data->position())},
                      {"optimizer_steps", optimizer.steps()}};
      header.config_yaml = config_to_yaml(c);
      saver.submit(std::move(header));
      record["checkpoint_stage_s"] = std::chrono::duration<double>(Clock::now() - t_stage).count();
      record["checkpoint_wait_s"] = saver.last_stage_wait_s();
      observer.checkpoint_staged(step + 1, record["checkpoint_stage_s"].get<double>());
    }
    saver.check();  // a failed background save stops training here, on every rank
    const SaveStats committed = saver.last_stats();
    observer.checkpoint_committed(committed.step, committed.bytes, committed.total_s);
    observer.step_done(step + 1, split, loss, grad_norm, lr, record);
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
  observer.checkpoint_committed(saved.step, saved.bytes, saved.total_s);
  observer.finished(stopping ? saved.step : end_step, stopping ? str("stopped on signal ", stopping) : "completed");
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
  const ShardMemory measured = sharded.memory();
  const int64_t compute_bytes = at::elementSize(shard_options.mixed_precision.param_dtype);
  MemoryReport memory =
      memory_report(measured, optimizer_bytes, state_formula(shard_options.strategy, measured, compute_bytes));
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
                      {"initialised_from", initialised_from},
                      {"checkpoint", summary.checkpoint},
                      {"world_size", world},
                      {"tp_size", mesh.tp_size()},
                      {"dp_size", dp},
                      {"final_loss", summary.final_loss},
                      {"final_val_loss", summary.final_val_loss},
                      {unit + "_per_s", summary.throughput},
                      {"params", model->param_count()},
                      {"arch", c.model.arch},
                      {"strategy", strategy_name(c.parallel.strategy)},
                      {"memory", memory.to_json()},
                      {"peak_rss_bytes", process_peak_rss_bytes()}};
  if (summary.final_val_accuracy >= 0) s["final_val_accuracy"] = summary.final_val_accuracy;
  if (identical) s["params_identical_across_ranks"] = *identical;
  std::ofstream(c.run.dir + "/summary.json") << s.dump(2) << "\n";
  if (group) group->barrier();
  return summary;
}

}  // namespace cadre
