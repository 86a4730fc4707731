// Assembling a re-formed group's state from the packed copies its ranks hold (copies_adopt.h).
#include "train/copies_adopt.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "train/checkpointing.h"

namespace cadre {
namespace {

constexpr int kOffers = 8;  // copies a rank offers at most (the newest)

struct Offer {
  int64_t step = -1, owner = -1, world = 0;
};

// Every rank's offers: [rank][k].
std::vector<std::vector<Offer>> gather_offers(const std::vector<PackedState>& held, comm::Communicator* group) {
  std::vector<const PackedState*> newest;
  for (const PackedState& s : held) newest.push_back(&s);
  std::sort(newest.begin(), newest.end(), [](auto* a, auto* b) { return a->step > b->step; });
  newest.resize(std::min<size_t>(newest.size(), kOffers));
  at::Tensor mine = at::full({kOffers * 3}, -1, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  for (size_t k = 0; k < newest.size(); ++k) {
    m[3 * k] = newest[k]->step;
    m[3 * k + 1] = newest[k]->owner;
    m[3 * k + 2] = newest[k]->world;
  }
  const int world = group ? group->size() : 1;
  at::Tensor all = mine;
  if (group) {
    all = at::empty({world * kOffers * 3}, at::kLong);
    group->all_gather(all, mine);
  }
  std::vector<std::vector<Offer>> out(static_cast<size_t>(world));
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < kOffers; ++k) {
      const int64_t* o = a + (r * kOffers + k) * 3;
      if (o[0] >= 0) out[r].push_back({o[0], o[1], o[2]});
    }
  return out;
}

// The newest step (of the larger group, on a tie) at which every old rank's copy is held, and
// which new rank sends each (the lowest holding it). step -1: none.
struct Plan {
  int64_t step = -1;
  int world = 0;
  std::vector<int> holder;  // per old rank
};
Plan choose(const std::vector<std::vector<Offer>>& offers) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> holders;  // (step, world) -> holder per old rank
  for (size_t r = 0; r < offers.size(); ++r)
    for (const Offer& o : offers[r]) {
      if (o.world < 1 || o.owner < 0 || o.owner >= o.world) continue;
      std::vector<int>& h = holders[{o.step, o.world}];
      h.resize(size_t(o.world), -1);
      if (h[size_t(o.owner)] < 0) h[size_t(o.owner)] = int(r);
    }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it)
    if (std::find(it->second.begin(), it->second.end(), -1) == it->second.end())
      return {it->first.first, int(it->first.second), it->second};
  return {};
}

// Whether checkpoint tensor `tensor` is parameter `name` or an optimizer state of it.
bool names_parameter(const std::string& tensor, const std::string& name) {
  if (tensor == "model." + name) return true;
  const std::string suffix = "." + name;
  return tensor.rfind("optim.", 0) == 0 && tensor.size() > suffix.size() &&
         tensor.compare(tensor.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What a rank takes from another stage's copy: the piece named `rng` (none or one), and those of
// the parameters this rank mirrors (a tied table, which only the stage it mirrors writes).
std::vector<SnapshotPiece> pieces_from_other_stage(const PackedState& copy, const std::string& rng,
                                                   const std::set<std::string>& mirrored) {
  std::vector<SnapshotPiece> out;
  for (const SnapshotPiece& p : copy.pieces) {
    bool take = p.tensor == rng;
    for (const std::string& name : mirrored) take = take || names_parameter(p.tensor, name);
    if (take) out.push_back(p);
  }
  return out;
}

const PackedState& held_copy(const std::vector<PackedState>& held, const Plan& plan, int owner, int rank) {
  for (const PackedState& s : held)
    if (s.step == plan.step && s.world == plan.world && s.owner == owner) return s;
  throw Error(str("rank ", rank, ": offered the copy of rank ", owner, " at step ", plan.step, " and does not hold it"));
}

}  // namespace

std::optional<Adopted> copies_adopt(const std::vector<PackedState>& held, FSDPModule& model, Optimizer& optimizer,
                                    BatchSource& data, comm::Communicator* group, int rank, int stage) {
  const Plan plan = choose(gather_offers(held, group));
  if (plan.step < 0) return std::nullopt;
  StateFiller filler(model, optimizer);
  const std::string rng = str("rng.cpu.rank", rank % plan.world);
  Adopted out;
  out.source = -1;
  out.owners = plan.world;
  int last_stage = 0;
  for (int owner = 0; owner < plan.world; ++owner) {
    const int holder = plan.holder[size_t(owner)];
    PackedState received;
    const PackedState* copy = &received;
    if (holder == rank) {
      copy = &held_copy(held, plan, owner, rank);
      if (group && group->size() > 1) PackedSend(*copy, *group, holder).wait();
    } else {
      received = receive_packed(*group, holder);
      out.bytes += int64_t(received.bytes.nbytes());
      out.transferred = true;
      CADRE_CHECK(received.step == plan.step && received.owner == owner && received.world == plan.world, "rank ", rank,
                  ": rank ", holder, " sent the copy of rank ", received.owner, " of ", received.world, " at step ",
                  received.step, " instead of rank ", owner, "'s at step ", plan.step);
    }
    if (copy->stage == stage) filler.apply(copy->pieces, copy->base(), rng);
    else filler.apply(pieces_from_other_stage(*copy, rng, model.mirrored()), copy->base(), rng);
    last_stage = std::max(last_stage, copy->stage);
    if (owner == 0) {
      out.step = copy->step;
      out.micro_batches = copy->micro_batches;
      out.record = copy->record;
      optimizer.set_steps(copy->optimizer_steps);
      data.set_position(uint64_t(copy->data_position));
    }
  }
  filler.finish(rank);
  out.stages = last_stage > 0 ? last_stage + 1 : 0;
  return out;
}

}  // namespace cadre
