// One rank of in-memory recovery's hand-over (train/live_state.h) for live_state_test: builds the
// user network replicated (NO_SHARD) with AdamW and a real BatchSource, gives itself the state
// the scenario says, adopts, and prints what it then holds.
//
//   live_state_worker <data_dir> <scenario>
//
// one_behind: rank 1 completed step 5 and rank 0 only step 4 (a ring collective that finished on
//             one rank only): rank 1's state and its step record must reach rank 0.
// newcomer:   rank 0 carries step 5, rank 1 nothing (a replacement).
// all_hold:   both carry step 5 with the same state: nothing crosses the network.
#include <c10/core/GradMode.h>

#include <cstdio>
#include <string>

#include "comm/comm.h"
#include "core/config.h"
#include "core/error.h"
#include "optim/make_optimizer.h"
#include "shard/fully_shard.h"
#include "shard/parallel_groups.h"
#include "shard/user_net.h"
#include "train/batch_source.h"
#include "train/live_state.h"

namespace {

// What a rank carries into the re-formation: step, data position, its record, and a value every
// parameter and moment is filled with; nullopt for nothing.
struct Carried {
  int64_t step;
  double fill;
};
std::optional<Carried> carried(const std::string& scenario, int rank) {
  if (scenario == "one_behind") return rank == 1 ? Carried{5, 2.0} : Carried{4, -1.0};
  if (scenario == "newcomer") return rank == 0 ? std::optional<Carried>(Carried{5, 2.0}) : std::nullopt;
  if (scenario == "all_hold") return Carried{5, 2.0};
  throw cadre::Error("live_state_worker: no scenario '" + scenario + "'");
}

double checksum(cadre::FSDPModule& model, cadre::Optimizer& optimizer) {
  double sum = 0;
  for (const at::Tensor& p : model.parameters()) sum += p.sum().item<double>();
  for (const cadre::OptimizerState& s : optimizer.state())
    for (const at::Tensor& t : *s.tensors) sum += 0.5 * t.sum().item<double>();
  return sum;
}

int run(int argc, char** argv) {
  CADRE_CHECK(argc == 3, "usage: live_state_worker <data_dir> <scenario>");
  const cadre::comm::JobEnv env = cadre::comm::JobEnv::from_env();
  at::set_num_threads(1);
  cadre::ParallelGroups groups = cadre::make_parallel_groups(env, cadre::Strategy::NoShard, 0, {});
  auto net = std::make_shared<usernet::Net>();
  net->init(7);
  cadre::FullyShardOptions options;
  options.strategy = cadre::Strategy::NoShard;
  options.groups = groups.groups;
  cadre::FSDPModule model = cadre::fully_shard(*net, options);
  std::unique_ptr<cadre::Optimizer> optimizer =
      cadre::make_optimizer(cadre::OptimConfig{}, model.parameters(), model.decay_mask());
  std::unique_ptr<cadre::BatchSource> data = cadre::BatchSource::open(argv[1], cadre::Split::Train, 1234);

  std::optional<cadre::LiveState> mine;
  if (auto c = carried(argv[2], env.rank)) {
    {
      c10::NoGradGuard no_grad;
      for (const at::Tensor& p : model.parameters()) p.fill_(c->fill);
      for (const cadre::OptimizerState& s : optimizer->state())
        for (const at::Tensor& t : *s.tensors) t.fill_(c->fill);
    }
    optimizer->set_steps(c->step);
    const std::string record = "{\"step\":" + std::to_string(c->step) + ",\"rank\":" + std::to_string(env.rank) + "}";
    mine = cadre::live_state_take(model, *optimizer, c->step, 100 + c->step, 6, record);
    // What the re-formed model starts from: a fresh one, not the state just taken.
    c10::NoGradGuard no_grad;
    for (const at::Tensor& p : model.parameters()) p.zero_();
  }
  std::optional<cadre::Adopted> adopted =
      cadre::live_state_adopt(mine ? &*mine : nullptr, model, *optimizer, *data, groups.world.get(), env.rank);
  CADRE_CHECK(adopted, "rank ", env.rank, ": nothing adopted");
  std::printf("rank %d: step %lld source %d transferred %d position %llu optimizer_steps %lld checksum %.6g "
              "record %s\n",
              env.rank, static_cast<long long>(adopted->step), adopted->source, adopted->transferred ? 1 : 0,
              static_cast<unsigned long long>(data->position()), static_cast<long long>(optimizer->steps()),
              checksum(model, *optimizer), adopted->record.c_str());
  groups.world->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "live_state_worker: %s\n", e.what());
    return 1;
  }
}
