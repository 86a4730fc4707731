// Carrying a replica's state across a re-formation (see live_state.h).
#include "train/live_state.h"

#include <ATen/ATen.h>

#include <cstring>

#include "core/error.h"
#include "core/shape_text.h"

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

}  // namespace cadre
