// One rank of a fully_shard run over the user network (user_net.h), for the multi-process
// tests: trains `steps` steps with libtorch's own Adam on the shard pieces and prints, from
// rank 0, each step's loss (the mean over every chunk of the global batch) and at the end
// whether every rank holds the same parameters.
//
//   shard_worker <strategy> <accum> <steps> [bucket_bytes] [shard_group_size] [check]
//
// Chunk c of a step is usernet::batch(step, c, kChunk); rank r's micro-batch m is chunk
// m * world + r, so one rank with accum = N * A reads what N ranks with accum = A read.
// `check` runs a scenario instead: "buffers" starts rank r with buffers r + 1 and prints them
// after one training forward; "outside" calls a unit outside its root's forward; "kept" trains
// and prints, after each forward and each backward, the units holding gathered parameters;
// "prefetch" trains calling prefetch_next_forward after each optimizer step and prints the units
// gathered then; "prefetch_early" calls it before the step instead (a misuse), and
// "prefetch_marked" too but announces the step with mark_updated. "bf16" trains as usual with
// bfloat16 compute parameters and float32 gradient reduction. "reversed" (alone or as
// "bf16,reversed") reads a step's micro-batches in reverse order: the same function, the
// gradients added in another order. "frozen" (alone or with "reversed") trains with the input
// layer and each block's first layer frozen, prints from rank 0, at each block's input gradient
// in the last step, which units hold their frozen parameters gathered, and from every rank
// whether its frozen pieces still hold the initial values and how many elements it keeps.
#include <c10/core/GradMode.h>
#include <torch/optim/adam.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/error.h"
#include "core/strategy.h"
#include "shard/fully_shard.h"
#include "shard/parallel_groups.h"
#include "shard/user_net.h"

namespace {

constexpr int64_t kChunk = 6;

void print_gathered(cadre::FSDPModule& fsdp, int64_t step, const char* when) {
  std::string units;
  for (const auto& f : fsdp.flat_params())
    if (f->full_allocated() && !f->master_is_full()) units += " " + f->unit;
  std::printf("step %lld after %s:%s\n", static_cast<long long>(step + 1), when, units.c_str());
}

bool has_word(const std::string& list, const std::string& word) {
  std::istringstream in(list);
  for (std::string w; std::getline(in, w, ',');)
    if (w == word) return true;
  return false;
}

// The input layer and each block's first layer stop training. The initial values of every
// frozen parameter (the network's own `offset` too), by name.
std::map<std::string, at::Tensor> freeze_some(usernet::Net& net) {
  std::map<std::string, at::Tensor> initial;
  for (auto& item : net.named_parameters()) {
    const std::string& name = item.key();
    if (name.rfind("embed.", 0) == 0 || name.find(".fc1.") != std::string::npos) item.value().set_requires_grad(false);
    if (!item.value().requires_grad()) initial[name] = item.value().detach().clone();
  }
  return initial;
}

std::string gathered_frozen(cadre::FSDPModule& fsdp) {
  std::string units;
  for (const auto& f : fsdp.frozen_flat_params())
    if (f->full_allocated() && !f->master_is_full()) units += " " + f->unit;
  return units;
}

// After the unit's own hooks (registered later, so run later): a hook on each block's input
// that runs when its gradient is complete, after the unit's post-backward hook on it.
std::vector<cadre::HookHandle> watch_block_inputs(usernet::Net& net, cadre::FSDPModule& fsdp, const bool& report) {
  std::vector<cadre::HookHandle> handles;
  for (size_t i = 0; i < net.blocks->size(); ++i) {
    cadre::ForwardHooks hooks;
    hooks.pre = [&fsdp, &report, i](const std::vector<at::Tensor>& inputs) {
      if (!report || !inputs[0].requires_grad()) return;
      inputs[0].register_hook([&fsdp, i](const at::Tensor&) {
        std::printf("backward blocks.%zu input: frozen gathered:%s\n", i, gathered_frozen(fsdp).c_str());
      });
    };
    handles.push_back(cadre::register_forward_hooks(*net.blocks->ptr(i), std::move(hooks)));
  }
  return handles;
}

// Every frozen piece this rank keeps equals its elements of the initial value.
void report_frozen(cadre::FSDPModule& fsdp, const std::map<std::string, at::Tensor>& initial, int rank) {
  bool unchanged = true;
  int64_t kept = 0, padded = 0;
  for (size_t k = 0; k < fsdp.frozen_parameters().size(); ++k) {
    const cadre::ShardPiece& where = fsdp.frozen_piece_layout()[k];
    const at::Tensor& piece = fsdp.frozen_parameters()[k];
    unchanged = unchanged && at::equal(piece, initial.at(where.name).reshape({-1}).narrow(0, where.start, piece.numel()));
  }
  for (const auto& f : fsdp.frozen_flat_params()) {
    kept += f->master.numel();
    padded += f->padded;
  }
  std::printf("rank %d frozen unchanged %d kept %lld of %lld in %zu flat parameters\n", rank, unchanged ? 1 : 0,
              static_cast<long long>(kept), static_cast<long long>(padded), fsdp.frozen_flat_params().size());
}

int run(int argc, char** argv) {
  CADRE_CHECK(argc >= 4, "usage: shard_worker <strategy> <accum> <steps> [bucket_bytes] [shard_group_size] [check]");
  const cadre::comm::JobEnv env = cadre::comm::JobEnv::from_env();
  at::set_num_threads(1);
  const cadre::Strategy strategy = cadre::parse_strategy(argv[1]);
  const int64_t accum = std::atoll(argv[2]), steps = std::atoll(argv[3]);
  const int64_t bucket = argc > 4 ? std::atoll(argv[4]) : 0, group = argc > 5 ? std::atoll(argv[5]) : 0;
  const std::string check = argc > 6 ? argv[6] : "";

  cadre::ParallelGroups groups = cadre::make_parallel_groups(env, strategy, group, {});
  auto net = std::make_shared<usernet::Net>();
  net->init(7);
  cadre::FullyShardOptions options;
  options.strategy = strategy;
  options.groups = groups.groups;
  if (bucket > 0) options.bucket_bytes = bucket;
  const bool bf16 = has_word(check, "bf16"), reversed = has_word(check, "reversed"), frozen = has_word(check, "frozen");
  const std::map<std::string, at::Tensor> initial = frozen ? freeze_some(*net) : std::map<std::string, at::Tensor>{};
  const at::ScalarType compute = bf16 ? at::kBFloat16 : at::kFloat;
  if (compute != at::kFloat) {
    options.mixed_precision = {compute, at::kFloat};
    // What FSDP does not convert (buffers) computes in the same dtype.
    c10::NoGradGuard no_grad;
    for (auto& b : net->buffers())
      if (b.is_floating_point()) b.set_data(b.to(compute));
  }
  if (strategy != cadre::Strategy::NoShard)
    for (torch::nn::Module* unit : net->units()) cadre::fully_shard(*unit, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
  bool report_backward = false;
  const std::vector<cadre::HookHandle> watching =
      frozen ? watch_block_inputs(*net, fsdp, report_backward) : std::vector<cadre::HookHandle>{};

  if (check == "buffers") {
    {
      c10::NoGradGuard no_grad;
      net->scale.fill_(env.rank + 1);
    }
    cadre::call(net, usernet::batch(0, 0, kChunk).first);
    std::printf("rank %d scale %g\n", env.rank, net->scale[0].item<double>());
    return 0;
  }
  if (check == "outside") {
    cadre::call(net->blocks[0]->as<usernet::Block>(), at::zeros({2, usernet::kDim}));
    return 0;
  }

  torch::optim::Adam adam(fsdp.parameters(), torch::optim::AdamOptions(1e-2));
  for (int64_t step = 0; step < steps; ++step) {
    adam.zero_grad();
    double loss_sum = 0;
    for (int64_t m = 0; m < accum; ++m) {
      std::optional<cadre::FSDPModule::NoSyncGuard> accumulate;
      if (m + 1 < accum) accumulate.emplace(&fsdp.tree());
      const int64_t micro = reversed ? accum - 1 - m : m;
      report_backward = frozen && env.rank == 0 && step + 1 == steps;
      auto [x, y] = usernet::batch(step, micro * env.world_size + env.rank, kChunk);
      at::Tensor loss = at::cross_entropy_loss(cadre::call(net, x.to(compute)).to(at::kFloat), y);
      if (check == "kept" && env.rank == 0) print_gathered(fsdp, step, "forward");
      (loss / double(accum)).backward();
      if (check == "kept" && env.rank == 0) print_gathered(fsdp, step, "backward");
      loss_sum += loss.item<double>();
    }
    fsdp.clip_grad_norm(1.0);
    if (check == "prefetch_early" || check == "prefetch_marked") fsdp.prefetch_next_forward();
    adam.step();
    if (check == "prefetch_marked") fsdp.mark_updated();
    if (check == "prefetch") {
      fsdp.prefetch_next_forward();
      if (env.rank == 0) print_gathered(fsdp, step, "prefetch");
    }
    double loss = loss_sum / double(accum);
    if (groups.world) {
      at::Tensor t = at::scalar_tensor(loss, at::kDouble).reshape({1}).to(at::kFloat);
      groups.world->all_reduce(t, cadre::comm::ReduceOp::Avg);
      loss = t.item<double>();
    }
    if (env.rank == 0) std::printf("step %lld loss %.9g\n", static_cast<long long>(step + 1), loss);
  }
  if (frozen) report_frozen(fsdp, initial, env.rank);
  const bool identical = fsdp.replicas_identical();
  cadre::ShardMemory memory = fsdp.memory();
  if (env.rank == 0)
    std::printf("identical %d units %lld flat_params %lld\n", identical ? 1 : 0, static_cast<long long>(memory.units),
                static_cast<long long>(memory.flat_params));
  if (groups.world) groups.world->barrier();
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shard_worker: %s\n", e.what());
    return 1;
  }
}
