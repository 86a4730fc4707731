// A user's own network, trained with FULL_SHARD on every rank `cadre run` starts:
//   cadre run --nproc-per-node 2 -- ./custom_module [steps]
// Nothing here is Cadre's model code: the network is defined below, and Cadre shards it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cadre/cadre.h>
#include <cstdio>
#include <cstdlib>

// A residual MLP block and a classifier made of them.
struct Block : torch::nn::Module {
  explicit Block(int64_t dim)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        up(register_module("up", torch::nn::Linear(dim, 4 * dim))),
        down(register_module("down", torch::nn::Linear(4 * dim, dim))) {}
  at::Tensor forward(const at::Tensor& x) { return x + down(at::gelu(up(norm(x)))); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear up, down;
};

struct Classifier : torch::nn::Module {
  Classifier(int64_t in, int64_t dim, int64_t classes, int depth)
      : embed(register_module("embed", torch::nn::Linear(in, dim))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        head(register_module("head", torch::nn::Linear(dim, classes))) {
    for (int i = 0; i < depth; ++i) blocks->push_back(std::make_shared<Block>(dim));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = embed(x);
    for (auto& block : *blocks) h = cadre::call(block->as<Block>(), h);  // units run through their hooks
    return head(h);
  }
  torch::nn::Linear embed;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  const cadre::comm::JobEnv env = cadre::comm::JobEnv::from_env();  // RANK, WORLD_SIZE, ... from cadre run
  at::set_num_threads(1);
  at::manual_seed(0);  // the same initial weights on every rank
  auto net = std::make_shared<Classifier>(32, 128, 10, 4);

  cadre::FullyShardOptions options;
  options.strategy = cadre::Strategy::FullShard;
  cadre::ParallelGroups groups = cadre::make_parallel_groups(env, options.strategy, 0, {});
  options.groups = groups.groups;
  // Every Block is a unit; the embedding and head form the root unit.
  cadre::FSDPModule model = cadre::auto_wrap(*net, cadre::wrap_by_type<Block>(), options);
  cadre::AdamW optimizer(model.parameters(), model.decay_mask(), {});
  int64_t total = 0;
  for (const auto& p : net->parameters()) total += p.numel();
  if (env.rank == 0)
    std::printf("rank 0 holds %lld of %lld parameters (FULL_SHARD over %d ranks)\n",
                static_cast<long long>(model.memory().params / 4), static_cast<long long>(total), env.world_size);

  // The task: labels are a fixed random linear rule of the inputs; each rank draws its own batch.
  const at::Tensor rule = at::randn({32, 10}, at::make_generator<at::CPUGeneratorImpl>(42));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + env.rank);
  for (int step = 1; step <= steps; ++step) {
    at::Tensor x = at::randn({64, 32}, gen), y = at::matmul(x, rule).argmax(1);
    model.zero_grad();
    at::Tensor loss = at::cross_entropy_loss(cadre::call(net, x), y);
    loss.backward();  // gradients are reduce-scattered to each rank's shard during the backward
    model.clip_grad_norm(1.0);
    optimizer.step(3e-3);
    if (env.rank == 0) std::printf("step %d loss %.4f\n", step, loss.item<double>());
  }
  if (groups.world) groups.world->barrier();  // rank 0 hosts the store: leave together
  return 0;
}
