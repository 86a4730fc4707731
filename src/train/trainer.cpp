// The training loop, top to bottom: check inputs, build the model and optimizer, then for
// each step run the micro-batches, clip, update, log, and evaluate; save at the end.
#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/comm.h"
#include "core/error.h"
#include "core/json_log.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/sysinfo.h"
#include "data/loader.h"
#include "models/llama/llama.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "train/tensor_file.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

using Clock = std::chrono::steady_clock;

// Inputs the config points at must agree with it before any work starts (exit code 2).
DatasetManifest check_inputs(const Config& c, const comm::JobEnv& env) {
  CADRE_CONFIG_CHECK(!c.data.dir.empty(), "data.dir is not set (a directory written by `cadre data prepare`)");
  CADRE_CONFIG_CHECK(fs::is_directory(c.data.dir), "data.dir '", c.data.dir, "' is not a directory");
  DatasetManifest m = manifest_read(c.data.dir);
  CADRE_CONFIG_CHECK(m.vocab_size <= c.model.vocab_size, "vocabulary mismatch: data.dir '", c.data.dir,
                     "' was tokenized with ", m.vocab_size, " tokens but model.vocab_size is ", c.model.vocab_size);
  CADRE_CONFIG_CHECK(m.seq_len <= c.model.max_seq_len, "data.dir '", c.data.dir, "' has samples of seq_len ", m.seq_len,
                     ", beyond model.max_seq_len ", c.model.max_seq_len);
  // With one rank every strategy is the same computation; across ranks only NO_SHARD (data
  // parallel with replicated state) is built so far.
  CADRE_CONFIG_CHECK(env.world_size == 1 || c.parallel.strategy == "NO_SHARD", "parallel.strategy ",
                     c.parallel.strategy, " with WORLD_SIZE=", env.world_size,
                     ": sharded strategies are not built yet; use parallel.strategy=NO_SHARD");
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

// Parameters as the optimizer sees them: float32 masters. With bf16 compute the model holds
// bf16 copies and gradients are accumulated into the masters after every micro-batch. Master
// gradients are views of one flat buffer, so reducing them across ranks is one collective.
struct MasterWeights {
  std::vector<std::string> names;
  std::vector<at::Tensor> model;   // the module's parameters (compute dtype)
  std::vector<at::Tensor> master;  // float32; the same tensors when compute is float32
  at::Tensor grad_flat;            // float32, every master gradient in order
  bool separate = false;

  MasterWeights(Llama& llama, at::ScalarType compute) {
    at::NoGradGuard no_grad;
    for (auto& item : llama.named_parameters()) {
      names.push_back(item.key());
      model.push_back(item.value());
    }
    separate = compute != at::kFloat;
    for (auto& p : model) {
      if (!separate) {
        master.push_back(p);
        continue;
      }
      master.push_back(p.detach().clone());
      p.set_data(p.to(compute));
    }
    int64_t total = 0;
    for (auto& m : master) total += m.numel();
    grad_flat = at::zeros({total}, at::kFloat);
    int64_t offset = 0;
    // A gradient that already exists is accumulated into in place by autograd, so these views
    // stay the gradients' storage for the whole run.
    for (auto& m : master) {
      m.mutable_grad() = grad_flat.narrow(0, offset, m.numel()).view(m.sizes());
      offset += m.numel();
    }
    if (separate)
      for (auto& p : model) p.mutable_grad() = at::zeros_like(p);
  }

  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> g;
    for (const auto& m : master) g.push_back(m.grad());
    return g;
  }

  void zero_grads() {
    grad_flat.zero_();
    if (separate)
      for (auto& p : model) p.mutable_grad().zero_();
  }

  // After a micro-batch's backward: move compute-dtype gradients into the float32 masters.
  void accumulate_micro_batch() {
    if (!separate) return;
    for (size_t i = 0; i < model.size(); ++i) {
      master[i].mutable_grad().add_(model[i].grad());
      model[i].mutable_grad().zero_();
    }
  }

  // After the optimizer step: refresh the compute copies.
  void publish() {
    if (!separate) return;
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < model.size(); ++i) model[i].copy_(master[i]);
  }
};

at::Tensor to_batch(const std::vector<int64_t>& tokens, int64_t batch, int64_t seq_len) {
  return at::from_blob(const_cast<int64_t*>(tokens.data()), {batch, seq_len + 1}, at::kLong).clone();
}

// Mean validation loss over train.eval_batches global batches of the validation split (the
// first eval_batches * batch_size * world samples); each rank evaluates its slice of each, so
// the figure does not depend on how the global batch is split across ranks.
double evaluate(Llama& model, TokenLoader& val, const Config& c, int rank, int world, comm::Communicator* group) {
  at::NoGradGuard no_grad;
  const int64_t B = c.data.batch_size, T = val.seq_len(), G = B * world;
  std::vector<int64_t> tokens(B * (T + 1));
  double total = 0;
  for (int64_t b = 0; b < c.train.eval_batches; ++b) {
    for (int64_t i = 0; i < B; ++i)
      val.sample((b * G + rank * B + i) % val.num_samples(), tokens.data() + i * (T + 1));
    at::Tensor batch = to_batch(tokens, B, T);
    at::Tensor logits = model.forward(batch.narrow(1, 0, T));
    total += llama_loss(logits, batch.narrow(1, 1, T)).item<double>();
  }
  if (group) {
    at::Tensor sum = at::scalar_tensor(total, at::kFloat).reshape({1});
    group->all_reduce(sum, comm::ReduceOp::Sum);
    total = sum.item<double>();
  }
  return total / double(c.train.eval_batches * world);
}

}  // namespace

TrainSummary train_run(const Config& c) {
  // --- inputs and run directory ---------------------------------------------------------
  const comm::JobEnv env = comm::JobEnv::from_env();
  DatasetManifest manifest = check_inputs(c, env);
  const int rank = env.rank, world = env.world_size;
  const bool lead = rank == 0;  // rank 0 writes the run directory and shows progress
  if (world > 1) log::set_rank(rank);
  if (lead) {
    fs::create_directories(c.run.dir);
    std::ofstream out(c.run.dir + "/config.yaml");
    out << config_to_yaml(c);
  }
  set_threads(c.train.threads);
  std::unique_ptr<comm::Communicator> group;
  if (world > 1) group = std::make_unique<comm::Communicator>(env);
  const bool reduce_bf16 = c.parallel.mixed_precision.reduce_dtype == "bfloat16";
  const at::ScalarType compute =
      c.parallel.mixed_precision.param_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;

  // --- model, optimizer, data -------------------------------------------------------------
  Llama model(c.model);
  model.init_weights(static_cast<uint64_t>(c.train.seed));
  if (group) {
    // Every rank initialises from the same seed; broadcasting makes equality a guarantee.
    at::NoGradGuard no_grad;
    for (auto& p : model.parameters()) group->broadcast(p, 0);
  }
  MasterWeights weights(model, compute);
  std::vector<bool> decay;
  for (const auto& m : weights.master) decay.push_back(m.dim() >= 2);  // no decay on norms
  AdamW optimizer(weights.master, decay,
                  {c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay});
  LrSchedule schedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.steps};

  TokenLoader train_data(c.data.dir, Split::Train, static_cast<uint64_t>(c.train.seed));
  std::unique_ptr<TokenLoader> val_data;
  if (c.train.eval_interval > 0) val_data = std::make_unique<TokenLoader>(c.data.dir, Split::Val, 0);

  const int64_t B = c.data.batch_size, T = manifest.seq_len, accum = c.optim.grad_accum_steps;
  const int64_t tokens_per_step = B * T * accum * world;
  const int64_t n_params = llama_param_count(c.model);
  log::info(str("train: llama ", n_params / 1e6, "M parameters, ", c.model.n_layers, " layers, dim ", c.model.dim,
                ", compute ", c.parallel.mixed_precision.param_dtype, ", ", world, " rank(s) x ", c.train.threads,
                " threads; ",
                train_data.num_samples(), " train samples of ", T, " tokens; ", tokens_per_step, " tokens per step"));

  std::unique_ptr<JsonLog> metrics;
  if (lead) metrics = std::make_unique<JsonLog>(c.run.dir + "/metrics.jsonl", /*append=*/false);
  std::vector<int64_t> tokens(B * (T + 1));
  std::vector<double> rates;
  TrainSummary summary;
  summary.run_dir = c.run.dir;
  std::unique_ptr<Progress> progress;
  if (lead) progress = std::make_unique<Progress>("train: step", c.train.steps, "step", 0.5);
  std::string progress_text;

  // --- the loop ---------------------------------------------------------------------------
  for (int64_t step = 0; step < c.train.steps; ++step) {
    auto t0 = Clock::now();
    weights.zero_grads();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      // Each rank takes its slice of the global micro-batch; together they read what one
      // rank with world * B samples would.
      train_data.next(B * world, rank * B, B, tokens.data());
      at::Tensor batch = to_batch(tokens, B, T);
      at::Tensor logits = model.forward(batch.narrow(1, 0, T));
      at::Tensor loss = llama_loss(logits, batch.narrow(1, 1, T));
      (loss / double(accum)).backward();
      weights.accumulate_micro_batch();
      loss_sum += loss.item<double>();
    }
    if (group) {
      // Data parallel: average gradients (and the loss, for the log) over ranks.
      if (reduce_bf16) {
        at::Tensor low = weights.grad_flat.to(at::kBFloat16);
        group->all_reduce(low, comm::ReduceOp::Avg);
        weights.grad_flat.copy_(low);
      } else {
        group->all_reduce(weights.grad_flat, comm::ReduceOp::Avg);
      }
      at::Tensor l = at::scalar_tensor(loss_sum, at::kFloat).reshape({1});
      group->all_reduce(l, comm::ReduceOp::Avg);
      loss_sum = l.item<double>();
    }
    std::vector<at::Tensor> grads = weights.grads();
    double grad_norm = std::sqrt(grad_sq_norm(grads));
    grad_clip_scale(grads, grad_norm, c.optim.grad_clip);
    double lr = schedule.at(step);
    optimizer.step(lr);
    weights.publish();

    double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double loss = loss_sum / double(accum);
    CADRE_CHECK(std::isfinite(loss), "step ", step + 1, ": loss is ", loss, " (diverged; lower optim.lr?)");
    double rate = tokens_per_step / step_s;
    if (step > 0) rates.push_back(rate);
    nlohmann::json record = {{"step", step + 1},        {"loss", loss},       {"lr", lr},
                             {"grad_norm", grad_norm},  {"tokens_per_s", rate}, {"step_time_s", step_s},
                             {"rss_bytes", process_rss_bytes()}};
    summary.final_loss = loss;

    bool last = step + 1 == c.train.steps;
    if (val_data && ((step + 1) % c.train.eval_interval == 0 || last)) {
      double val_loss = evaluate(model, *val_data, c, rank, world, group.get());
      record["val_loss"] = val_loss;
      summary.final_val_loss = val_loss;
      if (lead) log::info(str("train: step ", step + 1, " val_loss ", val_loss));
    }
    if (metrics) metrics->write(record);
    // The progress line redraws at most twice a second; its numbers refresh every log_interval.
    if ((step + 1) % c.train.log_interval == 0 || step == 0) {
      char line[160];
      std::snprintf(line, sizeof line, "loss %.4f lr %.2e gnorm %.3f %.0f tok/s", loss, lr, grad_norm, rate);
      progress_text = line;
    }
    if (progress && !last) progress->update(step + 1, progress_text);
  }
  std::sort(rates.begin(), rates.end());
  summary.tokens_per_s = rates.empty() ? 0 : rates[rates.size() / 2];
  summary.steps = c.train.steps;
  {
    char line[160];
    std::snprintf(line, sizeof line, "loss %.4f, median %.0f tok/s", summary.final_loss, summary.tokens_per_s);
    if (progress) progress->finish(line);
  }
  if (!lead) {
    summary.lead = false;
    group->barrier();  // rank 0 hosts the store: leave only after everyone is done with it
    return summary;
  }

  // --- final checkpoint (model in float32, optimizer state, position) -----------------------
  TensorDict state;
  for (size_t i = 0; i < weights.names.size(); ++i) {
    state["model." + weights.names[i]] = weights.master[i];
    state["optim.exp_avg." + weights.names[i]] = optimizer.exp_avg()[i];
    state["optim.exp_avg_sq." + weights.names[i]] = optimizer.exp_avg_sq()[i];
  }
  state["meta.step"] = at::scalar_tensor(static_cast<int64_t>(c.train.steps), at::kLong);
  state["meta.data_position"] = at::scalar_tensor(static_cast<int64_t>(train_data.position()), at::kLong);
  tensor_file_save(c.run.dir + "/checkpoint.pt", state);

  nlohmann::json s = {{"steps", summary.steps},
                      {"world_size", world},
                      {"final_loss", summary.final_loss},
                      {"final_val_loss", summary.final_val_loss},
                      {"tokens_per_s", summary.tokens_per_s},
                      {"params", n_params},
                      {"peak_rss_bytes", process_peak_rss_bytes()}};
  std::ofstream(c.run.dir + "/summary.json") << s.dump(2) << "\n";
  if (group) group->barrier();
  return summary;
}

}  // namespace cadre
