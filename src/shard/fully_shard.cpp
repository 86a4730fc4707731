// The API of fully_shard.h: making a module (or a group of siblings) an FSDP unit, taking in
// the trees of units already created under it, and the FSDPModule handle, whose methods act on
// the tree (fsdp_tree.h says which file implements each phase).
#include "shard/fully_shard.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "shard/fsdp_tree.h"
#include "shard/module_hooks.h"

namespace cadre {
namespace detail {
namespace {

// Which module belongs to which unit: to find the units under a module being sharded, and to
// refuse sharding a module twice.
struct UnitRegistry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, Unit*> units;
};
UnitRegistry& unit_registry() {
  static UnitRegistry r;
  return r;
}

bool same_options(const FullyShardOptions& a, const FullyShardOptions& b) {
  return a.strategy == b.strategy && a.groups.shard == b.groups.shard && a.groups.replica == b.groups.replica &&
         a.tensor_parallel == b.tensor_parallel &&
         a.mixed_precision.param_dtype == b.mixed_precision.param_dtype &&
         a.mixed_precision.reduce_dtype == b.mixed_precision.reduce_dtype;
}

// Moves the units already created under `modules` into `tree`, in creation order (the same on
// every rank; a unit is always created before the units that enclose it, so inner units come
// first). Returns the trees taken in: they must outlive the registry's lock, since re-pointing
// their modules' owners drops what may be their last references.
std::vector<std::shared_ptr<FsdpTree>> take_in_inner_units(FsdpTree& tree, const std::shared_ptr<FsdpTree>& self,
                                                           const std::vector<torch::nn::Module*>& modules,
                                                           const UnitRegistry& registry) {
  std::vector<std::shared_ptr<FsdpTree>> inner;
  for (const auto* m : subtree(modules)) {
    auto it = registry.units.find(m);
    if (it == registry.units.end()) continue;
    std::shared_ptr<FsdpTree> t = it->second->owners.front()->tree;
    if (std::find(inner.begin(), inner.end(), t) == inner.end()) inner.push_back(t);
  }
  for (const auto& t : inner) {
    CADRE_CHECK(t->flats.empty(), "fully_shard: units under '", modules[0]->name(),
                "' were already used (their tree ran a forward); shard the root before the first forward");
    CADRE_CHECK(same_options(t->options, tree.options), "fully_shard: a unit under '", modules[0]->name(),
                "' has another strategy, mesh or mixed precision; one FSDP tree uses one setting");
    for (auto& u : t->units) {
      u->tree = &tree;
      for (TreeOwner* owner : u->owners) owner->tree = self;
      tree.units.push_back(std::move(u));
    }
    t->units.clear();
    t->absorbed = true;
  }
  std::sort(tree.units.begin(), tree.units.end(),
            [](const std::unique_ptr<Unit>& a, const std::unique_ptr<Unit>& b) { return a->seq < b->seq; });
  return inner;
}

// The new unit: the tree's state as a child of each module, and the forward hooks.
std::unique_ptr<Unit> make_unit(const std::shared_ptr<FsdpTree>& tree, const std::vector<torch::nn::Module*>& modules) {
  static std::atomic<uint64_t> next_seq{0};
  auto unit = std::make_unique<Unit>();
  unit->seq = next_seq++;
  unit->modules = modules;
  unit->tree = tree.get();
  Unit* raw = unit.get();
  for (auto* m : modules) {
    auto owner = std::make_shared<TreeOwner>();
    owner->tree = tree;
    m->register_module(kStateChild, owner);
    unit->owners.push_back(owner.get());
    ForwardHooks hooks;
    hooks.pre = [raw](const std::vector<at::Tensor>& inputs) { raw->tree->pre_forward(*raw, inputs); };
    hooks.post = [raw](const std::vector<at::Tensor>& outputs) { raw->tree->post_forward(*raw, outputs); };
    unit->hooks.push_back(register_forward_hooks(*m, std::move(hooks)));
  }
  return unit;
}

}  // namespace

std::unordered_set<const torch::nn::Module*> subtree(const std::vector<torch::nn::Module*>& modules) {
  std::unordered_set<const torch::nn::Module*> out;
  for (auto* m : modules) {
    out.insert(m);
    for (const auto& child : m->modules(/*include_self=*/false)) out.insert(child.get());
  }
  return out;
}

Unit::~Unit() {
  UnitRegistry& r = unit_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto* m : modules) {
    auto it = r.units.find(m);
    if (it != r.units.end() && it->second == this) r.units.erase(it);
  }
}

}  // namespace detail

using detail::FsdpTree;

FSDPModule fully_shard(const std::vector<torch::nn::Module*>& modules, const FullyShardOptions& options) {
  CADRE_CHECK(!modules.empty(), "fully_shard: no modules given");
  auto tree = std::make_shared<FsdpTree>(options);
  auto& registry = detail::unit_registry();
  std::vector<std::shared_ptr<FsdpTree>> inner;  // released after the lock (see take_in_inner_units)
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto* m : modules)
      CADRE_CHECK(!registry.units.count(m), "fully_shard: module '", m->name(), "' is already an FSDP unit");
    inner = detail::take_in_inner_units(*tree, tree, modules, registry);
  }
  std::unique_ptr<detail::Unit> unit = detail::make_unit(tree, modules);
  detail::Unit* raw = unit.get();
  tree->units.push_back(std::move(unit));
  for (size_t i = 0; i < tree->units.size(); ++i) tree->units[i]->index = i;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto* m : modules) registry.units[m] = raw;
  }
  return FSDPModule(tree);
}

FSDPModule fully_shard(torch::nn::Module& module, const FullyShardOptions& options) {
  return fully_shard(std::vector<torch::nn::Module*>{&module}, options);
}

detail::FsdpTree& FSDPModule::tree() {
  CADRE_CHECK(tree_, "empty FSDPModule handle");
  tree_->ensure_init();
  return *tree_;
}

const std::vector<at::Tensor>& FSDPModule::parameters() { return tree().pieces; }
const std::vector<bool>& FSDPModule::decay_mask() { return tree().piece_decay; }
const std::vector<ShardPiece>& FSDPModule::piece_layout() { return tree().piece_layout; }
void FSDPModule::zero_grad() { tree().zero_grad(); }
double FSDPModule::clip_grad_norm(double max_norm) { return tree().clip_grad_norm(max_norm); }
void FSDPModule::mark_updated() { tree().mark_updated(); }
void FSDPModule::prefetch_next_forward() { tree().prefetch_next_forward(); }
int FSDPModule::replica_count() {
  auto* r = tree().options.groups.replica;
  return r ? r->size() : 1;
}
int FSDPModule::replica_index() {
  auto* r = tree().options.groups.replica;
  return r ? r->rank() : 0;
}
int FSDPModule::shard_index() {
  auto* s = tree().options.groups.shard;
  return s ? s->rank() : 0;
}
std::vector<std::pair<std::string, at::Tensor>> FSDPModule::unsharded_state() { return tree().unsharded; }
const std::vector<at::Tensor>& FSDPModule::frozen_parameters() { return tree().frozen_pieces; }
const std::vector<ShardPiece>& FSDPModule::frozen_piece_layout() { return tree().frozen_layout; }
const std::vector<std::unique_ptr<FlatParam>>& FSDPModule::frozen_flat_params() { return tree().frozen_flats; }
ShardMemory FSDPModule::memory() { return tree().memory(); }

ShardPlan FSDPModule::plan() {
  CADRE_CHECK(tree_, "empty FSDPModule handle");
  return tree_->plan();
}
const TensorParallelLayout* FSDPModule::tensor_parallel() { return tree().options.tensor_parallel.get(); }
const std::set<std::string>& FSDPModule::mirrored() { return tree().options.mirrored; }
const std::vector<std::unique_ptr<FlatParam>>& FSDPModule::flat_params() { return tree().flats; }
bool FSDPModule::replicas_identical() { return tree().replicas_identical(); }

FSDPModule::NoSyncGuard::NoSyncGuard(detail::FsdpTree* tree) : tree_(tree) {
  if (tree_->no_sync_depth++ == 0) tree_->reduce_now = false;
}
FSDPModule::NoSyncGuard::~NoSyncGuard() {
  if (--tree_->no_sync_depth == 0) tree_->reduce_now = true;
}
FSDPModule::NoSyncGuard FSDPModule::no_sync() { return NoSyncGuard(&tree()); }

}  // namespace cadre
