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
//
// Four ranks as pipeline stages, pp 2 x dp 2 (ranks 0-1 now stage 0, ranks 2-3 stage 1;
// live_state_adopt_stages); each stage's state is filled with its own value:
// stage_moved:     rank 1 carries stage 1 but now holds stage 0, rank 2 is a newcomer: each takes
//                  its new stage's state from that stage's survivor (ranks 0 and 3).
// stage_lost:      only stage 0 is carried: the group resumes from disk.
// stages_apart:    stage 0's survivors completed step 5, stage 1's step 4: from disk.
// stage_elsewhere: stage 1 is carried only by rank 1, which now holds stage 0: from disk.
#include <c10/core/GradMode.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"
#include "core/error.h"
#include "optim/make_optimizer.h"
#include "shard/device_mesh.h"
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
  int64_t stage = 0;
};
std::optional<Carried> carried(const std::string& scenario, int rank) {
  if (scenario == "one_behind") return rank == 1 ? Carried{5, 2.0} : Carried{4, -1.0};
  if (scenario == "newcomer") return rank == 0 ? std::optional<Carried>(Carried{5, 2.0}) : std::nullopt;
  if (scenario == "all_hold") return Carried{5, 2.0};
  const Carried stage0{5, 1.0, 0}, stage1{5, 3.0, 1};
  using By = std::vector<std::optional<Carried>>;  // by rank
  By by;
  if (scenario == "stage_moved") by = {stage0, stage1, std::nullopt, stage1};
  if (scenario == "stage_lost") by = {stage0, stage0, std::nullopt, std::nullopt};
  if (scenario == "stages_apart") by = {stage0, stage0, Carried{4, 3.0, 1}, Carried{4, 3.0, 1}};
  if (scenario == "stage_elsewhere") by = {stage0, stage1, std::nullopt, std::nullopt};
  if (by.empty()) throw cadre::Error("live_state_worker: no scenario '" + scenario + "'");
  return by.at(size_t(rank));
}
bool staged(const std::string& scenario) { return scenario.rfind("stage", 0) == 0; }

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
  const std::string scenario = argv[2];
  std::optional<cadre::DeviceMesh> mesh;  // the stage scenarios': pp 2 x dp 2
  if (staged(scenario)) mesh.emplace(env, 1, cadre::comm::CommOptions{}, 2);
  cadre::ParallelGroups groups = mesh ? cadre::make_parallel_groups(mesh->dp(), cadre::Strategy::NoShard, 0)
                                      : cadre::make_parallel_groups(env, cadre::Strategy::NoShard, 0, {});
  cadre::comm::Communicator* world = mesh ? mesh->world() : groups.world.get();
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
  if (auto c = carried(scenario, env.rank)) {
    {
      c10::NoGradGuard no_grad;
      for (const at::Tensor& p : model.parameters()) p.fill_(c->fill);
      for (const cadre::OptimizerState& s : optimizer->state())
        for (const at::Tensor& t : *s.tensors) t.fill_(c->fill);
    }
    optimizer->set_steps(c->step);
    const std::string record = "{\"step\":" + std::to_string(c->step) + ",\"rank\":" + std::to_string(env.rank) + "}";
    mine = cadre::live_state_take(model, *optimizer, c->step, 100 + c->step, 6, record);
    mine->stage = c->stage;
    // What the re-formed model starts from: a fresh one, not the state just taken.
    c10::NoGradGuard no_grad;
    for (const at::Tensor& p : model.parameters()) p.zero_();
  }
  const cadre::LiveState* kept = mine ? &*mine : nullptr;
  std::optional<cadre::Adopted> adopted =
      mesh ? cadre::live_state_adopt_stages(kept, model, *optimizer, *data, *mesh)
           : cadre::live_state_adopt(kept, model, *optimizer, *data, world, env.rank);
  if (!adopted) {
    std::printf("rank %d: nothing adopted: resumes from disk\n", env.rank);
    world->barrier();
    return 0;
  }
  std::printf("rank %d: step %lld source %d transferred %d position %llu optimizer_steps %lld checksum %.6g "
              "record %s\n",
              env.rank, static_cast<long long>(adopted->step), adopted->source, adopted->transferred ? 1 : 0,
              static_cast<unsigned long long>(data->position()), static_cast<long long>(optimizer->steps()),
              checksum(model, *optimizer), adopted->record.c_str());
  world->barrier();
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
