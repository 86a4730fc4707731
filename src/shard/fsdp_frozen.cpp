// Frozen parameters (requires_grad off: a LoRA base, a frozen embedding) are sharded like
// trainable ones, in flat parameters of their own: one per unit when sharded (gathered and
// freed with the unit's trainable one), one for all of them under NO_SHARD. They have no
// gradient buffers, no optimizer pieces and are never reduced.
//
// Nothing tells a frozen flat parameter that the backward is done with it: no gradient of its
// own arrives. Every backward op that reads a frozen value produces a gradient for something
// that requires grad inside the unit: the unit's trainable parameters or the unit's inputs (as
// PyTorch FSDP's reshard-only post-backward hook on the inputs). So it is freed once the
// gradients of all the unit's inputs that require grad are complete and its trainable flat
// parameter's gradients have all arrived; at the end of the backward whatever is left. A unit
// with other units inside (the root) also reads its frozen values to pass gradients on to
// them, which neither signal covers: it keeps its frozen parameters to the end of the
// backward, as it keeps its trainable ones gathered through it (fsdp_schedule.cpp).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <memory>

#include "shard/fsdp_tree.h"

namespace cadre::detail {

void FsdpTree::build_frozen_flats(const RootParams& root, const Ownership& owner) {
  std::vector<std::unordered_set<const torch::nn::Module*>> inside;
  for (auto& u : units) inside.push_back(subtree(u->modules));
  for (auto& u : units)
    for (auto& v : units)
      if (v != u && inside[u->index].count(v->modules.front())) u->encloses = true;
  std::vector<std::string> names;
  std::vector<int> unit_of;
  std::vector<std::vector<at::Tensor>> by_flat;
  if (sharded()) {
    by_flat = group_by_unit(root, owner, /*trainable=*/false, names, unit_of);
  } else {  // NO_SHARD: whole on every rank; gathered (a compute copy refreshed) with the buckets
    std::vector<at::Tensor> all;
    for (const auto& p : root.params)
      if (!p.requires_grad()) all.push_back(p);
    if (!all.empty()) by_flat.push_back(std::move(all));
    names.push_back("frozen");
  }
  for (size_t k = 0; k < by_flat.size(); ++k) {
    frozen_flats.push_back(make_flat(names[k], by_flat[k], root, /*trainable=*/false));
    frozen_state_.push_back(std::make_unique<FlatState>());
    FlatParam& f = *frozen_flats.back();
    if (sharded()) {
      frozen_state_.back()->unit = unit_of[k];
      units[unit_of[k]]->frozen = static_cast<int>(k);
    }
    for (size_t i = 0; i < f.params.size(); ++i) {
      const auto [lo, hi] = f.shard_range(i);
      if (lo >= hi) continue;
      frozen_pieces.push_back(f.master.narrow(0, lo - f.shard_offset, hi - lo));
      frozen_layout.push_back({k, f.names[i], f.params[i].sizes().vec(), lo - f.offsets[i]});
    }
    if (free_after_backward_ && !f.master_is_full()) f.full_free();
  }
}

// In a forward that records gradients: a hook on each of the unit's inputs that requires grad
// counts that input's gradient as complete, once (a leaf input the caller passes again in a
// later step keeps its old hooks, which must not count again).
void FsdpTree::watch_inputs(const Unit& u, const std::vector<at::Tensor>& inputs) {
  if (u.frozen < 0 || !at::GradMode::is_enabled()) return;
  FlatState& st = *frozen_state_[u.frozen];
  const size_t unit = u.index;
  for (const auto& x : inputs) {
    if (!x.defined() || !x.requires_grad()) continue;
    ++st.inputs_pending;
    x.register_hook([this, unit, counted = std::make_shared<bool>(false)](const at::Tensor&) {
      if (*counted) return;
      *counted = true;
      --frozen_state_[units[unit]->frozen]->inputs_pending;
      frozen_maybe_done(unit);
    });
  }
}

void FsdpTree::frozen_maybe_done(size_t unit) {
  const Unit& u = *units[unit];
  if (u.frozen < 0) return;
  FlatState& st = *frozen_state_[u.frozen];
  if (u.encloses || st.inputs_pending > 0 || (u.flat >= 0 && !state_[u.flat]->ready)) return;
  if (frees_in_backward()) reshard(*frozen_flats[u.frozen], st);
}

// What no input or gradient freed: a unit whose inputs need no gradient and that has no
// trainable parameters of its own.
void FsdpTree::frozen_finish_backward() {
  for (size_t k = 0; k < frozen_flats.size(); ++k) {
    frozen_state_[k]->inputs_pending = 0;
    if (frees_in_backward()) reshard(*frozen_flats[k], *frozen_state_[k]);
  }
}

}  // namespace cadre::detail
