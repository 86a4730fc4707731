// One rank of sharded in-memory recovery (train/peer_copies.h, train/copies_adopt.h) for
// peer_copies_test: the ranks of an old group build the user network sharded (FULL_SHARD, or the
// strategy given: SHARD_GRAD_OP, ZERO1, HYBRID_SHARD with shard groups of 1) with AdamW, give
// every element of the model and optimizer state a value that names its place in the global
// tensor, pack their parts at step 7, exchange copies with their buddies (ranks_per_node 1), and
// then the ranks of a new group (another size, or a newcomer) adopt what the survivors hold and
// check every element they now own against that value.
// Under pipeline stages (the stages scenario) each stage is the user network sharded over that
// stage's data-parallel ranks, its values tagged with the stage: a part filled from another
// stage's copy shows. The last stage mirrors the first stage's first parameter (as a tied table:
// FullyShardOptions::mirrored), which carries stage 0's tag on both and which only stage 0's
// copies hold.
//
//   peer_copies_worker <data_dir> <scenario> <new_port> [strategy] [bf16-frozen]
//
// bf16-frozen: bf16 compute with the frozen parameters kept in it (a LoRA base,
// FullyShardOptions::frozen_in_compute_dtype): their parts travel as bf16.
//
// shrink:      3 -> 2: rank 2 is lost after the exchange; its part comes from rank 0's copy.
// grow:        2 -> 3: ranks 0 and 1 hold their own parts; rank 2 is a newcomer.
// replace:     3 -> 3: rank 1 is replaced by a newcomer; its part comes from rank 2's copy.
// copies_lost: 3 -> 2 with rank 0's copy of rank 2 dropped: no step is covered, nothing adopted.
// stages:      pp 2 x dp 2 -> pp 2 x dp 1, buddies two ranks on (ranks_per_node 2): ranks 2 and 3
//              (all of stage 1) are lost; rank 1, a stage-0 rank, now holds stage 1 and fills it
//              from its copy of rank 3 and rank 0's of rank 2, while its own part serves rank 0.
//
// Prints "rng <x>" (the old rank's next random number after packing) and "adopted step ... ok"
// or "nothing adopted".
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdio>
#include <optional>
#include <string>

#include "comm/comm.h"
#include "core/config.h"
#include "core/error.h"
#include "optim/make_optimizer.h"
#include "shard/device_mesh.h"
#include "shard/fully_shard.h"
#include "shard/parallel_groups.h"
#include "shard/user_net.h"
#include "train/batch_source.h"
#include "train/copies_adopt.h"
#include "train/peer_copies.h"

namespace {

struct Scenario {
  int old_world, new_world;
  std::string name;
  int pp = 1, ranks_per_node = 1;
  int old_rank(int process) const;  // -1: not in the old group (a newcomer)
  int new_rank(int process) const;  // -1: not in the new group (lost)
};
int Scenario::old_rank(int process) const { return process < old_world ? process : -1; }
int Scenario::new_rank(int process) const { return process < new_world ? process : -1; }

Scenario scenario(const std::string& name) {
  if (name == "shrink" || name == "copies_lost") return {3, 2, name};
  if (name == "grow") return {2, 3, name};
  if (name == "replace") return {3, 3, name};
  if (name == "stages") return {4, 2, name, /*pp=*/2, /*ranks_per_node=*/2};
  throw cadre::Error("peer_copies_worker: no scenario '" + name + "'");
}

// The value of element i of `tensor` (a name): its place, recognisable after any re-layout.
at::Tensor expected(const std::string& tensor, int64_t start, int64_t n) {
  double tag = 0;
  for (char ch : tensor) tag = std::fmod(tag * 31 + double(ch), 97.0);
  return at::arange(start, start + n, at::kDouble).remainder(1024).mul(1.0 / 1024).add(tag).to(at::kFloat);
}

struct Job {
  std::optional<cadre::DeviceMesh> mesh;  // pipeline stages: pp outermost, this rank's stage's dp group
  std::shared_ptr<usernet::Net> net;
  cadre::ParallelGroups groups;
  cadre::FSDPModule model;
  std::unique_ptr<cadre::Optimizer> optimizer;
  int stage() const { return mesh ? mesh->pp_rank() : 0; }
  // The stage whose values parameter `name` carries: the first stage's for one mirrored here.
  int stage_of(const std::string& name) { return model.mirrored().count(name) ? 0 : stage(); }
  cadre::comm::Communicator* world() const { return mesh ? mesh->world() : groups.world.get(); }
};

std::unique_ptr<Job> build(const cadre::comm::JobEnv& env, const Scenario& s, cadre::Strategy strategy,
                           bool bf16_frozen) {
  auto job = std::make_unique<Job>();
  if (s.pp > 1) {
    job->mesh.emplace(env, 1, cadre::comm::CommOptions{}, s.pp);
    job->groups = cadre::make_parallel_groups(job->mesh->dp(), strategy, /*shard_group_size=*/1);
  } else {
    job->groups = cadre::make_parallel_groups(env, strategy, /*shard_group_size=*/1, {});
  }
  job->net = std::make_shared<usernet::Net>();
  job->net->init(7);
  cadre::FullyShardOptions options;
  options.strategy = strategy;
  options.groups = job->groups.groups;
  if (s.pp > 1 && job->stage() == s.pp - 1) options.mirrored = {job->net->named_parameters().begin()->key()};
  if (bf16_frozen) {
    options.mixed_precision.param_dtype = at::kBFloat16;
    options.frozen_in_compute_dtype = true;
  }
  for (auto* unit : job->net->units()) cadre::fully_shard(*unit, options);
  job->model = cadre::fully_shard(*job->net, options);
  for (const at::Tensor& piece : job->model.frozen_parameters())
    CADRE_CHECK(piece.scalar_type() == (bf16_frozen ? at::kBFloat16 : at::kFloat), "a frozen piece is ",
                piece.scalar_type());
  job->optimizer = cadre::make_optimizer(cadre::OptimConfig{}, job->model.parameters(), job->model.decay_mask());
  return job;
}

// Every element of this rank's part: set to (fill) or compared with (check) its value in this
// rank's stage (a frozen piece kept in bf16: the value rounded to it). Buffers hold 3 everywhere.
int64_t visit(Job& job, bool fill) {
  c10::NoGradGuard no_grad;
  int64_t wrong = 0;
  const auto& layout = job.model.piece_layout();
  const std::vector<cadre::OptimizerState> state = job.optimizer->state();
  auto one = [&](const std::string& name, const cadre::ShardPiece& where, const at::Tensor& t) {
    const std::string tagged = std::to_string(job.stage_of(where.name)) + "/" + name;
    const at::Tensor want = expected(tagged, where.start, t.numel()).to(t.scalar_type());
    if (fill) t.view({-1}).copy_(want);
    else wrong += t.view({-1}).ne(want).sum().item<int64_t>();
  };
  for (size_t k = 0; k < layout.size(); ++k) {
    one("model." + layout[k].name, layout[k], job.model.parameters()[k]);
    for (const auto& s : state) one("optim." + s.name + "." + layout[k].name, layout[k], (*s.tensors)[k]);
  }
  const auto& frozen = job.model.frozen_piece_layout();
  for (size_t k = 0; k < frozen.size(); ++k) one("model." + frozen[k].name, frozen[k], job.model.frozen_parameters()[k]);
  for (auto& [name, t] : job.model.unsharded_state()) {
    if (fill) t.fill_(3);
    else wrong += t.ne(3).sum().item<int64_t>();
  }
  return wrong;
}

cadre::comm::JobEnv env_for(const cadre::comm::JobEnv& base, int rank, int world, int port) {
  cadre::comm::JobEnv env = base;
  env.rank = rank;
  env.world_size = world;
  env.master_port = port;
  return env;
}

// The old group: pack at step 7, exchange with the buddy, hand over what this rank holds.
std::vector<cadre::PackedState> old_group(const cadre::comm::JobEnv& env, const Scenario& s,
                                          cadre::Strategy strategy, bool bf16_frozen) {
  std::unique_ptr<Job> job = build(env, s, strategy, bf16_frozen);
  visit(*job, /*fill=*/true);
  job->optimizer->set_steps(7);
  at::manual_seed(uint64_t(1000 + env.rank));
  cadre::Snapshot staging;
  cadre::PackedState own = cadre::pack_state(staging, job->model, *job->optimizer, env.rank, env.world_size,
                                             {7, 107, 7, 6, "{\"step\":7,\"rank\":" + std::to_string(env.rank) + "}",
                                              job->stage()});
  std::printf("rank %d: rng %lld\n", env.rank, static_cast<long long>(at::randint(1 << 30, {1}).item<int64_t>()));
  cadre::PeerCopies copies(*job->world(), s.ranks_per_node);
  copies.start(std::move(own), *job->world());
  copies.commit();  // waits for this rank's side of the exchange (the barrier below for the others')
  std::vector<cadre::PackedState> held = copies.release();
  if (s.name == "copies_lost" && env.rank == 0) held.resize(1);  // its own part only
  std::printf("rank %d: holds %zu copies (buddy %d, giver %d)\n", env.rank, held.size(), copies.buddy(), copies.giver());
  job->world()->barrier();
  return held;
}

int run(int argc, char** argv) {
  CADRE_CHECK(argc >= 4 && argc <= 6,
              "usage: peer_copies_worker <data_dir> <scenario> <new_port> [strategy] [bf16-frozen]");
  const cadre::comm::JobEnv env = cadre::comm::JobEnv::from_env();
  const Scenario s = scenario(argv[2]);
  const cadre::Strategy strategy = cadre::parse_strategy(argc >= 5 ? argv[4] : "FULL_SHARD");
  const bool bf16_frozen = argc == 6 && std::string(argv[5]) == "bf16-frozen";
  CADRE_CHECK(argc < 6 || bf16_frozen, "peer_copies_worker: unknown option '", argv[argc - 1], "'");
  at::set_num_threads(1);
  std::vector<cadre::PackedState> held;
  const int old_rank = s.old_rank(env.rank), new_rank = s.new_rank(env.rank);
  if (old_rank >= 0) held = old_group(env_for(env, old_rank, s.old_world, env.master_port), s, strategy, bf16_frozen);
  if (s.name == "replace" && env.rank == 1) held.clear();  // the replacement starts with nothing
  if (new_rank < 0) return 0;
  const cadre::comm::JobEnv fresh = env_for(env, new_rank, s.new_world, std::stoi(argv[3]));
  std::unique_ptr<Job> job = build(fresh, s, strategy, bf16_frozen);
  std::unique_ptr<cadre::BatchSource> data = cadre::BatchSource::open(argv[1], cadre::Split::Train, 1234);
  std::optional<cadre::Adopted> adopted =
      cadre::copies_adopt(held, job->model, *job->optimizer, *data, job->world(), new_rank, job->stage());
  if (!adopted) {
    std::printf("rank %d: nothing adopted\n", new_rank);
  } else {
    const int64_t wrong = visit(*job, /*fill=*/false);
    std::printf("rank %d: adopted step %lld owners %d stages %d position %llu optimizer_steps %lld micro_batches %lld "
                "transferred %d rng %lld wrong %lld record %s\n",
                new_rank, static_cast<long long>(adopted->step), adopted->owners, adopted->stages,
                static_cast<unsigned long long>(data->position()), static_cast<long long>(job->optimizer->steps()),
                static_cast<long long>(adopted->micro_batches), adopted->transferred ? 1 : 0,
                static_cast<long long>(at::randint(1 << 30, {1}).item<int64_t>()), static_cast<long long>(wrong),
                adopted->record.c_str());
  }
  job->world()->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peer_copies_worker: %s\n", e.what());
    return 1;
  }
}
