// Carrying a replica's state across a re-formation (see live_state.h).
#include "train/live_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/shape_text.h"
#include "shard/device_mesh.h"

namespace cadre {
namespace {

// The tensors that make up a rank's training state, named, in a fixed order (the same on every
// rank of a group: the layout does not depend on the rank).
std::vector<std::pair<std::string, at::Tensor>> state_tensors(FSDPModule& model, Optimizer& optimizer) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const auto& layout = model.piece_layout();
  const auto& pieces = model.parameters();
  const std::vector<OptimizerState> state = optimizer.state();
  for (size_t k = 0; k < layout.size(); ++k) {
    out.emplace_back("model." + layout[k].name, pieces[k]);
    for (const OptimizerState& s : state) out.emplace_back("optim." + s.name + "." + layout[k].name, (*s.tensors)[k]);
  }
  for (size_t k = 0; k < model.frozen_piece_layout().size(); ++k)
    out.emplace_back("model." + model.frozen_piece_layout()[k].name, model.frozen_parameters()[k]);
  for (auto& [name, t] : model.unsharded_state()) out.emplace_back("buffer." + name, t);
  return out;
}

// Restores a carried state into this rank's (freshly built) model and optimizer.
void restore(const LiveState& mine, const std::vector<std::pair<std::string, at::Tensor>>& live, int rank) {
  CADRE_CHECK(mine.tensors.size() == live.size(), "rank ", rank, ": the carried state has ", mine.tensors.size(),
              " tensors and the re-formed model ", live.size(), " (in-memory recovery needs NO_SHARD)");
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) {
    const auto& [name, kept] = mine.tensors[i];
    const at::Tensor& into = live[i].second;
    CADRE_CHECK(name == live[i].first && kept.sizes() == into.sizes(), "rank ", rank, ": carried tensor '", name, "' ",
                shape_text(kept.sizes().vec()), " does not fit '", live[i].first, "' ",
                shape_text(into.sizes().vec()), " of the re-formed model (in-memory recovery needs NO_SHARD)");
    into.copy_(kept);
  }
}

// `text` (read on `source` only) to every rank; `size`, its length, every rank already knows.
std::string broadcast_text(const std::string& text, int64_t size, comm::Communicator& group, int source) {
  if (size == 0) return "";
  at::Tensor words = at::zeros({(size + 7) / 8}, at::kLong);  // collectives move numbers, not bytes
  if (group.rank() == source) std::memcpy(words.data_ptr<int64_t>(), text.data(), text.size());
  group.broadcast(words, source);
  return std::string(reinterpret_cast<const char*>(words.data_ptr<int64_t>()), size_t(size));
}

// Every state tensor and the scalars from `source` to every rank.
int64_t broadcast_state(const std::vector<std::pair<std::string, at::Tensor>>& live, at::Tensor scalars,
                        comm::Communicator& group, int source) {
  int64_t bytes = 0;
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : live) {
    at::Tensor buffer = t.is_contiguous() ? t : t.contiguous();
    group.broadcast(buffer, source);
    if (!buffer.is_same(t)) t.copy_(buffer);
    bytes += int64_t(t.nbytes());
  }
  group.broadcast(scalars, source);
  return bytes + int64_t(scalars.nbytes());
}

// What one rank of the new group carries: the steps it completed (-1: nothing) and their stage.
struct StageCarrier {
  int64_t step = -1;
  int64_t stage = 0;
};

// Every rank's carrier, the same list on every rank.
std::vector<StageCarrier> stage_carriers(const LiveState* mine, const DeviceMesh& mesh) {
  const int n = mesh.world_size();
  at::Tensor table = at::zeros({n, 2}, at::kLong);  // each rank fills its row: the sum is the table
  int64_t* row = table.data_ptr<int64_t>() + 2 * mesh.rank();
  row[0] = mine ? mine->step + 1 : 0;
  row[1] = mine ? mine->stage : 0;
  if (mesh.world()) mesh.world()->all_reduce(table, comm::ReduceOp::Sum);
  std::vector<StageCarrier> out(static_cast<size_t>(n));
  const int64_t* v = table.data_ptr<int64_t>();
  for (int r = 0; r < n; ++r) out[size_t(r)] = {v[2 * r] - 1, v[2 * r + 1]};
  return out;
}

// Why the new group's stages cannot go on from the carried states ("" when they can, and then
// `step`, the step every stage goes on from). Stage s's new ranks are s * dp_size onwards.
std::string stages_unrecoverable(const std::vector<StageCarrier>& carriers, const DeviceMesh& mesh, int64_t* step) {
  const int stages = mesh.pp_size(), replicas = mesh.dp_size();
  std::vector<int64_t> best(size_t(stages), -1);
  for (const StageCarrier& c : carriers)
    if (c.step >= 0 && c.stage < stages) best[size_t(c.stage)] = std::max(best[size_t(c.stage)], c.step);
  for (int s = 0; s < stages; ++s) {
    if (best[size_t(s)] < 0) return str("no live rank holds stage ", s);
    if (best[size_t(s)] != best[0])
      return str("stage 0's survivors completed step ", best[0], " and stage ", s, "'s step ", best[size_t(s)]);
  }
  for (int s = 0; s < stages; ++s) {
    const auto first = carriers.begin() + s * replicas, end = first + replicas;
    if (std::none_of(first, end, [&](const StageCarrier& c) { return c.stage == s && c.step == best[0]; }))
      return str("none of stage ", s, "'s new ranks (", s * replicas, "..", (s + 1) * replicas - 1,
                 ") holds its state of step ", best[0]);
  }
  *step = best[0];
  return "";
}

}  // namespace

LiveState live_state_take(FSDPModule& model, Optimizer& optimizer, int64_t step, int64_t data_position,
                          int64_t micro_batches, std::string last_record) {
  LiveState s;
  s.step = step;
  s.last_record = std::move(last_record);
  s.data_position = data_position;
  s.optimizer_steps = optimizer.steps();
  s.micro_batches = micro_batches;
  for (auto& [name, t] : state_tensors(model, optimizer))
    s.tensors.emplace_back(name, t.device().is_cpu() ? t.detach().clone() : t.detach().to(at::kCPU));
  return s;
}

std::optional<Adopted> live_state_adopt(const LiveState* mine, FSDPModule& model, Optimizer& optimizer,
                                        BatchSource& data, comm::Communicator* group, int rank) {
  const int world = group ? group->size() : 1;
  // Who holds what: the most steps any rank carries, and (negated) the fewest (-1: none).
  const int64_t have = mine ? mine->step : -1;
  at::Tensor extent = at::tensor({have, -have}, at::kLong);
  if (group) group->all_reduce(extent, comm::ReduceOp::Max);
  const int64_t best = extent[0].item<int64_t>(), fewest = -extent[1].item<int64_t>();
  if (best < 0) return std::nullopt;
  // The source: the lowest rank carrying the most steps.
  at::Tensor claim = at::tensor({mine && mine->step == best ? int64_t(world - rank) : 0}, at::kLong);
  if (group) group->all_reduce(claim, comm::ReduceOp::Max);
  Adopted out;
  out.source = world - int(claim[0].item<int64_t>());
  const auto live = state_tensors(model, optimizer);
  if (mine) restore(*mine, live, rank);
  at::Tensor scalars = at::tensor({best, mine ? mine->data_position : 0, mine ? mine->optimizer_steps : 0,
                                   mine ? mine->micro_batches : 0, mine ? int64_t(mine->last_record.size()) : 0},
                                  at::kLong);
  out.record = mine ? mine->last_record : "";
  if (group && fewest != best) {  // a newcomer, or a survivor a step behind
    out.bytes = broadcast_state(live, scalars, *group, out.source);
    out.record = broadcast_text(out.record, scalars[4].item<int64_t>(), *group, out.source);
    out.bytes += int64_t(out.record.size());
    out.transferred = true;
  }
  const int64_t* v = scalars.data_ptr<int64_t>();
  out.step = v[0];
  out.micro_batches = v[3];
  model.mark_updated();
  optimizer.set_steps(v[2]);
  data.set_position(uint64_t(v[1]));
  return out;
}

std::optional<Adopted> live_state_adopt_stages(const LiveState* mine, FSDPModule& model, Optimizer& optimizer,
                                               BatchSource& data, const DeviceMesh& mesh) {
  CADRE_CHECK(mesh.tp_size() == 1, "rank ", mesh.rank(), ": in-memory recovery of pipeline stages needs tp_size 1");
  const std::vector<StageCarrier> carriers = stage_carriers(mine, mesh);
  if (std::none_of(carriers.begin(), carriers.end(), [](const StageCarrier& c) { return c.step >= 0; }))
    return std::nullopt;
  int64_t step = -1;
  const std::string why = stages_unrecoverable(carriers, mesh, &step);
  if (!why.empty()) {
    if (mesh.rank() == 0)
      log::warn(str("recovery: the pipeline stages cannot go on from memory (", why, "); resuming from disk"));
    return std::nullopt;
  }
  // Within the stage, as replicas do: restored where it fits, else sent by the replica with the most steps.
  const bool fits = mine && mine->stage == mesh.pp_rank();
  std::optional<Adopted> out = live_state_adopt(fits ? mine : nullptr, model, optimizer, data, mesh.dp(), mesh.dp_rank());
  CADRE_CHECK(out && out->step == step, "rank ", mesh.rank(), ": stage ", mesh.pp_rank(), " took the state of step ",
              out ? out->step : -1, " where every stage goes on from step ", step);
  // Every stage's transfer, for the lead's line.
  at::Tensor sent = at::tensor({out->bytes, int64_t(out->transferred)}, at::kLong);
  if (mesh.world()) mesh.world()->all_reduce(sent, comm::ReduceOp::Sum);
  out->bytes = sent[0].item<int64_t>();
  out->transferred = sent[1].item<int64_t>() > 0;
  out->source = -1;
  out->stages = mesh.pp_size();
  return out;
}

}  // namespace cadre
