// Setting a tree up at its first forward (or first use of its handle): unit names, which unit
// owns each parameter, the buffers (unsharded), one flat parameter per unit (or per DDP bucket,
// ddp_buckets.cpp) and the gradient hooks that tell the schedule a flat parameter's gradients
// are complete; frozen parameters get flat parameters of their own (fsdp_frozen.cpp).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"
#include "shard/deferred_param.h"
#include "shard/fsdp_tree.h"
#include "shard/shard_plan.h"

namespace cadre::detail {
namespace {

// Consecutive siblings "layers.0" .. "layers.3" read "layers.0-3"; others "a..b".
std::string group_name(const std::string& a, const std::string& b) {
  size_t dot_a = a.rfind('.'), dot_b = b.rfind('.');
  return dot_a != std::string::npos && a.substr(0, dot_a) == b.substr(0, dot_b == std::string::npos ? 0 : dot_b)
             ? a + "-" + b.substr(dot_b + 1)
             : a + ".." + b;
}

}  // namespace

RootParams root_params(torch::nn::Module& root) {
  RootParams out;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
    if (!out.names.emplace(impl, item.key()).second) continue;
    out.position[impl] = out.params.size();
    out.params.push_back(item.value());
  }
  return out;
}

void FsdpTree::ensure_init() {
  check_not_absorbed();
  if (initialized_) return;
  set_root();
  build_flats(*root_);
  initialized_ = true;
}

void FsdpTree::check_not_absorbed() const {
  CADRE_CHECK(!absorbed, "this FSDP handle's units were taken in by fully_shard on an enclosing module; "
                         "use the handle that call returned");
}

void FsdpTree::set_root() {
  Unit& root_unit = *units.back();
  CADRE_CHECK(root_unit.modules.size() == 1, "the root of an FSDP tree must be one module, not a group of ",
              root_unit.modules.size());
  root_ = root_unit.modules[0];
  check_options();
  name_units();
}

void FsdpTree::check_options() {
  const bool shard_group = options.groups.shard != nullptr;
  CADRE_CHECK(sharded() || !shard_group, "NO_SHARD takes no shard group (use ShardGroups::replica)");
  free_after_forward_ = options.reshard_after_forward.value_or(options.strategy == Strategy::FullShard ||
                                                               options.strategy == Strategy::HybridShard);
  free_after_backward_ = !keeps_full();
  CADRE_CHECK(!keeps_full() || !options.reshard_after_forward.value_or(false),
              "reshard_after_forward needs a strategy that shards parameters (NO_SHARD and ZERO1 keep them whole)");
}

// Units by their modules' paths from the root, for messages and reports.
void FsdpTree::name_units() {
  std::unordered_map<const torch::nn::Module*, std::string> module_name{{root_, ""}};
  for (const auto& item : root_->named_modules("", /*include_self=*/false)) module_name.emplace(item.value().get(), item.key());
  for (auto& u : units) {
    std::vector<std::string> names;
    for (auto* m : u->modules) {
      auto it = module_name.find(m);
      CADRE_CHECK(it != module_name.end(), "an FSDP unit's module is not inside the root module");
      names.push_back(it->second);
    }
    if (u.get() == units.back().get()) u->name = kRootUnit;
    else if (names.size() == 1) u->name = names[0];
    else u->name = group_name(names.front(), names.back());
  }
}

void FsdpTree::build_flats(torch::nn::Module& root) {
  c10::NoGradGuard no_grad;
  const RootParams params = root_params(root);
  const Ownership owner = assign_owners(params);
  std::unordered_set<size_t> owning_units;
  for (const auto& [impl, u] : owner) owning_units.insert(u);
  units_with_params_ = static_cast<int64_t>(owning_units.size());
  check_param_dtypes(params);
  list_buffers(root);

  std::vector<std::string> flat_names;
  std::vector<int> unit_of;
  const std::vector<std::vector<at::Tensor>> by_flat = sharded() ? group_by_unit(params, owner, true, flat_names, unit_of)
                                                                 : group_into_buckets(params, owner, flat_names);
  std::vector<size_t> piece_rank;  // each piece's parameter's position in the root's order
  for (size_t k = 0; k < by_flat.size(); ++k) {
    add_flat(flat_names[k], by_flat[k], params);
    add_optimizer_pieces(k, params, piece_rank);
    // Sharded at rest (with a one-rank group the gradient buffer is the shard's: it stays).
    FlatParam& f = *flats.back();
    if (free_after_backward_ && !f.master_is_full()) f.full_free();
    if (free_after_backward_ && !f.grad_shard.is_same(f.grad_full)) f.grad_free();
  }
  for (size_t k = 0; k < unit_of.size(); ++k) {  // sharded: flat k is unit_of[k]'s
    units[unit_of[k]]->flat = static_cast<int>(k);
    state_[k]->unit = unit_of[k];
  }
  order_pieces_for_norm(piece_rank);
  build_frozen_flats(params, owner);
  order_.position.assign(units.size(), -1);
}

// The innermost unit whose modules contain each parameter. A parameter shared by two units
// that do not nest would be freed by one while the other computes with it.
Ownership FsdpTree::assign_owners(const RootParams& root) const {
  Ownership owner;
  std::vector<std::unordered_set<const torch::nn::Module*>> unit_modules;
  for (auto& u : units) unit_modules.push_back(subtree(u->modules));
  for (size_t u = 0; u < units.size(); ++u) {
    std::unordered_set<const c10::TensorImpl*> mine;
    for (auto* m : units[u]->modules)
      for (const auto& p : m->parameters(/*recurse=*/true)) mine.insert(p.unsafeGetTensorImpl());
    for (const auto& p : root.params) {
      const c10::TensorImpl* impl = p.unsafeGetTensorImpl();
      if (!mine.count(impl)) continue;
      auto it = owner.find(impl);
      if (it == owner.end()) {
        owner[impl] = u;
        continue;
      }
      const Unit& inner = *units[it->second];
      bool nested = true;
      for (auto* m : inner.modules) nested = nested && unit_modules[u].count(m);
      CADRE_CHECK(nested, "parameter '", root.names.at(impl), "' is shared by FSDP units '", inner.name, "' and '",
                  units[u]->name, "', which do not contain one another; make their common ancestor the unit that "
                  "holds it (do not fully_shard the modules that share it separately)");
    }
  }
  return owner;
}

// Every parameter is flattened, frozen or not: float32 (the compute dtype is MixedPrecision's).
void FsdpTree::check_param_dtypes(const RootParams& root_params) const {
  for (const auto& p : root_params.params)
    CADRE_CHECK(p.scalar_type() == at::kFloat, "parameter '", root_params.names.at(p.unsafeGetTensorImpl()), "' is ",
                p.scalar_type(), "; FSDP keeps float32 parameters (compute dtype comes from MixedPrecision)");
}

// Buffers stay whole on every rank, broadcast in a training forward (fsdp_buffers.cpp).
void FsdpTree::list_buffers(torch::nn::Module& root) {
  for (const auto& item : root.named_buffers(/*recurse=*/true)) {
    bool seen = false;
    for (const auto& [name, t] : unsharded) seen = seen || t.is_same(item.value());
    if (!seen) unsharded.emplace_back(item.key(), item.value());
  }
}

// The sharded strategies: one flat parameter per unit that owns trainable (or frozen)
// parameters, named after it.
std::vector<std::vector<at::Tensor>> FsdpTree::group_by_unit(const RootParams& root, const Ownership& owner,
                                                             bool trainable, std::vector<std::string>& flat_names,
                                                             std::vector<int>& unit_of) const {
  std::vector<std::vector<at::Tensor>> by_flat;
  for (auto& u : units) {
    std::vector<at::Tensor> mine;
    for (const auto& p : root.params) {
      auto it = owner.find(p.unsafeGetTensorImpl());
      if (p.requires_grad() == trainable && it != owner.end() && it->second == u->index) mine.push_back(p);
    }
    if (mine.empty()) continue;
    unit_of.push_back(static_cast<int>(u->index));
    by_flat.push_back(std::move(mine));
    flat_names.push_back(u->name);
  }
  return by_flat;
}

void FsdpTree::add_flat(const std::string& name, const std::vector<at::Tensor>& params, const RootParams& root) {
  flats.push_back(make_flat(name, params, root, /*trainable=*/true));
  state_.push_back(std::make_unique<FlatState>());
  hook_grad_accumulators(flats.size() - 1);
}

std::unique_ptr<FlatParam> FsdpTree::make_flat(const std::string& name, const std::vector<at::Tensor>& params,
                                               const RootParams& root, bool trainable) const {
  comm::Communicator* shard = options.groups.shard;
  const int group = shard ? shard->size() : 1, group_rank = shard ? shard->rank() : 0;
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(root.names.at(p.unsafeGetTensorImpl()));
  // Sharded on the CPU, the gradients stay in the compute dtype until the reduce-scatter, which
  // widens them to float32 itself (comm.h): the same float32 sums, without converting and
  // zero-filling a float32 copy of every gradient each backward. NCCL reduces in one dtype.
  // Deferred parameters are made on options.device; initialised ones stay where they are.
  const ParamValues values = deferred_values(names, params);
  const c10::Device device = values ? options.device : params.front().device();
  const bool compute_dtype_grads = sharded() && !zero1() && group > 1 && device.is_cpu();
  return std::make_unique<FlatParam>(name, names, params, group, group_rank, options.mixed_precision.param_dtype,
                                     zero1(), compute_dtype_grads, values, device, trainable,
                                     !trainable && options.frozen_in_compute_dtype);
}

// How a flat parameter's deferred parameters are filled: from options.param_source, each rank
// asking for its own elements of its tensor-parallel part. Empty when none is deferred.
ParamValues FsdpTree::deferred_values(const std::vector<std::string>& names, const std::vector<at::Tensor>& params) const {
  bool deferred = false;
  for (const auto& p : params) deferred = deferred || has_no_storage(p);
  if (!deferred) return {};
  CADRE_CHECK(options.param_source, "parameter '", names.front(), "' has no storage (a model built deferred) and ",
              "FullyShardOptions::param_source is not set");
  std::shared_ptr<const ParamSource> source = options.param_source;
  std::shared_ptr<const TensorParallelLayout> layout = options.tensor_parallel;
  return [source, layout, names, params](size_t i, int64_t start, at::Tensor out) {
    const Placement* where = layout ? layout->find(names[i]) : nullptr;
    fill_from_source(*source, names[i], params[i].sizes(), where, start, out);
  };
}

// A post hook on each parameter's AccumulateGrad node counts the flat parameter's gradients
// down; the last one hands the flat parameter to the schedule (grads_ready).
void FsdpTree::hook_grad_accumulators(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  for (auto& p : f.params) {
    auto acc = torch::autograd::impl::grad_accumulator(p);
    CADRE_CHECK(acc, "FSDP unit ", f.unit, ": no gradient accumulator for a parameter");
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (--state_[k]->pending == 0) grads_ready(k);
          return outputs;
        }));
    st.accumulators.push_back(std::move(acc));
  }
  st.pending = static_cast<int64_t>(f.params.size());
}

}  // namespace cadre::detail
