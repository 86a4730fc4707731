// FSDP units over any module tree: flat parameters per unit (or per DDP bucket), gather/free
// around each unit's forward, hooks for backward, gradient reduction as units complete,
// prefetch in recorded execution order, buffer broadcast, clipping and diagnostics.
#include "shard/fully_shard.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "optim/grad_clip.h"
#include "shard/module_hooks.h"

namespace cadre {

namespace detail {

class FsdpTree;

// Registered on each unit's module as child "_fsdp_state": the module owns the sharding state
// (as FSDP2 keeps it on the module), so a unit lives exactly as long as its module, whether
// or not anyone keeps the handle fully_shard returned.
struct TreeOwner : torch::nn::Module {
  std::shared_ptr<FsdpTree> tree;
};
constexpr const char* kStateChild = "_fsdp_state";

struct Unit {
  std::vector<torch::nn::Module*> modules;
  std::vector<TreeOwner*> owners;  // one per module
  std::vector<HookHandle> hooks;
  FsdpTree* tree = nullptr;
  size_t index = 0;      // position in the tree's units
  std::string name;      // path from the root ("root" for the root), set up at init
  int flat = -1;         // its flat parameter (sharded strategies; -1: none)
  int64_t entered = 0;   // module calls in the current forward
  uint64_t seq = 0;      // creation order
  ~Unit();
};

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

std::unordered_set<const torch::nn::Module*> subtree(const std::vector<torch::nn::Module*>& modules) {
  std::unordered_set<const torch::nn::Module*> out;
  for (auto* m : modules) {
    out.insert(m);
    for (const auto& child : m->modules(/*include_self=*/false)) out.insert(child.get());
  }
  return out;
}

}  // namespace

Unit::~Unit() {
  UnitRegistry& r = unit_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto* m : modules) {
    auto it = r.units.find(m);
    if (it != r.units.end() && it->second == this) r.units.erase(it);
  }
}

// Gather and reduction state of one flat parameter.
struct FlatState {
  comm::Work gather_work;
  bool gather_pending = false;
  at::Tensor gather_send;  // kept alive until the gather finished
  bool stale = false;      // the master changed since the full buffer was filled
  // AccumulateGrad nodes of the flat parameter's parameters. The parameters hold them only
  // weakly: without these references the post hooks would silently disappear.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  int64_t pending = 0;  // parameters whose gradient has not arrived in this backward
  bool ready = false;
  comm::Work reduce_work;
  bool reduce_pending = false;
  at::Tensor reduce_in, reduce_out;
  bool reduced = false;  // ZeRO-1: reduced since the last training forward
};

class FsdpTree {
 public:
  explicit FsdpTree(FullyShardOptions o) : options(std::move(o)) {}

  FullyShardOptions options;
  std::vector<std::unique_ptr<Unit>> units;  // inner first, the root last
  bool absorbed = false;                     // its units now belong to an enclosing tree

  void ensure_init();
  void pre_forward(Unit& u);
  void post_forward(Unit& u, const std::vector<at::Tensor>& outputs);
  void finish_backward();
  void zero_grad();
  double clip_grad_norm(double max_norm);
  void mark_updated() {
    for (auto& st : state_) st->stale = true;
  }
  bool replicas_identical();
  ShardMemory memory() const;

  std::vector<std::unique_ptr<FlatParam>> flats;
  std::vector<at::Tensor> pieces;
  std::vector<bool> piece_decay;
  std::vector<ShardPiece> piece_layout;
  std::vector<std::pair<std::string, at::Tensor>> unsharded;  // buffers and frozen parameters
  bool reduce_now = true;
  int no_sync_depth = 0;

 private:
  bool sharded() const { return options.strategy != Strategy::NoShard; }
  // Parameters stay whole between steps (DDP, ZeRO-1): nothing is ever freed.
  bool keeps_full() const { return options.strategy == Strategy::NoShard || options.strategy == Strategy::Zero1; }
  bool zero1() const { return options.strategy == Strategy::Zero1; }
  void build_flats(torch::nn::Module& root);
  void gather_start(size_t k);
  void gather_wait(size_t k);
  void reshard(size_t k);
  void root_pre_forward();
  void pre_backward(size_t u);
  void grads_ready(size_t k);
  void start_reduce(size_t k);
  void reduce_finish(size_t k);
  void ensure_final_callback();
  void broadcast_buffers();
  void relink_grads();
  void hook_outputs(size_t u, const std::vector<at::Tensor>& outputs);
  void note_working_set();

  bool initialized_ = false;
  torch::nn::Module* root_ = nullptr;
  bool free_after_forward_ = false, free_after_backward_ = false;
  std::vector<std::unique_ptr<FlatState>> state_;
  std::vector<at::Tensor> piece_grads_;                  // the tensors pieces' .grad must be
  std::vector<size_t> piece_norm_order_;                 // pieces in root parameter order
  std::vector<std::pair<size_t, int64_t>> piece_where_;  // (flat, offset in the shard)
  std::deque<size_t> reducing_;                          // flats whose reduction is in flight
  size_t next_bucket_ = 0;                               // NO_SHARD: buckets launch in order
  bool forward_active_ = false;
  bool callback_queued_ = false;
  std::vector<size_t> order_cur_, order_prev_;  // units in forward execution order
  std::vector<int64_t> order_pos_;              // unit -> position in order_cur_ (-1: absent)
  int64_t peak_working_ = 0;
  int64_t units_with_params_ = 0;
};

void FsdpTree::ensure_init() {
  CADRE_CHECK(!absorbed, "this FSDP handle's units were taken in by fully_shard on an enclosing module; "
                         "use the handle that call returned");
  if (initialized_) return;
  Unit& root_unit = *units.back();
  CADRE_CHECK(root_unit.modules.size() == 1, "the root of an FSDP tree must be one module, not a group of ",
              root_unit.modules.size());
  root_ = root_unit.modules[0];
  const bool shard_group = options.groups.shard != nullptr;
  CADRE_CHECK(sharded() || !shard_group, "NO_SHARD takes no shard group (use ShardGroups::replica)");
  free_after_forward_ = options.reshard_after_forward.value_or(options.strategy == Strategy::FullShard ||
                                                               options.strategy == Strategy::HybridShard);
  free_after_backward_ = !keeps_full();
  CADRE_CHECK(!keeps_full() || !options.reshard_after_forward.value_or(false),
              "reshard_after_forward needs a strategy that shards parameters (NO_SHARD and ZERO1 keep them whole)");

  // Names: modules and parameters by their path from the root.
  std::unordered_map<const torch::nn::Module*, std::string> module_name{{root_, ""}};
  for (const auto& item : root_->named_modules("", /*include_self=*/false)) module_name.emplace(item.value().get(), item.key());
  for (auto& u : units) {
    std::vector<std::string> names;
    for (auto* m : u->modules) {
      auto it = module_name.find(m);
      CADRE_CHECK(it != module_name.end(), "an FSDP unit's module is not inside the root module");
      names.push_back(it->second);
    }
    if (u.get() == &root_unit) u->name = "root";
    else if (names.size() == 1) u->name = names[0];
    else {
      // Consecutive siblings "layers.0" .. "layers.3" read "layers.0-3".
      const std::string& a = names.front();
      const std::string& b = names.back();
      size_t dot_a = a.rfind('.'), dot_b = b.rfind('.');
      u->name = dot_a != std::string::npos && a.substr(0, dot_a) == b.substr(0, dot_b == std::string::npos ? 0 : dot_b)
                    ? a + "-" + b.substr(dot_b + 1)
                    : a + ".." + b;
    }
  }
  build_flats(*root_);
  initialized_ = true;
}

void FsdpTree::build_flats(torch::nn::Module& root) {
  c10::NoGradGuard no_grad;
  // Parameters in the root's order, each once (a tied parameter registered in two modules
  // keeps its first name).
  std::vector<at::Tensor> params;
  std::unordered_map<const c10::TensorImpl*, std::string> param_name;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
    if (param_name.emplace(impl, item.key()).second) params.push_back(item.value());
  }
  // Owner of each parameter: the innermost unit whose modules contain it. A parameter shared
  // by two units that do not nest would be freed by one while the other computes with it.
  std::unordered_map<const c10::TensorImpl*, size_t> owner;
  std::vector<std::unordered_set<const torch::nn::Module*>> unit_modules;
  for (auto& u : units) unit_modules.push_back(subtree(u->modules));
  for (size_t u = 0; u < units.size(); ++u) {
    std::unordered_set<const c10::TensorImpl*> mine;
    for (auto* m : units[u]->modules)
      for (const auto& p : m->parameters(/*recurse=*/true)) mine.insert(p.unsafeGetTensorImpl());
    for (const auto& p : params) {
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
      CADRE_CHECK(nested, "parameter '", param_name[impl], "' is shared by FSDP units '", inner.name, "' and '",
                  units[u]->name, "', which do not contain one another; make their common ancestor the unit that "
                  "holds it (do not fully_shard the modules that share it separately)");
    }
  }

  std::unordered_set<size_t> owning_units;
  for (const auto& [impl, u] : owner) owning_units.insert(u);
  units_with_params_ = static_cast<int64_t>(owning_units.size());
  std::vector<std::vector<at::Tensor>> by_flat;
  std::vector<std::string> flat_names;
  for (const auto& p : params) {
    const c10::TensorImpl* impl = p.unsafeGetTensorImpl();
    if (!p.requires_grad() || !owner.count(impl)) {
      unsharded.emplace_back(param_name[impl], p);
      continue;
    }
    CADRE_CHECK(p.scalar_type() == at::kFloat, "parameter '", param_name[impl], "' is ", p.scalar_type(),
                "; FSDP keeps float32 parameters (compute dtype comes from MixedPrecision)");
  }
  if (sharded()) {
    for (auto& u : units) {
      std::vector<at::Tensor> mine;
      for (const auto& p : params) {
        auto it = owner.find(p.unsafeGetTensorImpl());
        if (p.requires_grad() && it != owner.end() && it->second == u->index) mine.push_back(p);
      }
      if (mine.empty()) continue;
      u->flat = static_cast<int>(by_flat.size());
      by_flat.push_back(std::move(mine));
      flat_names.push_back(u->name);
    }
  } else {
    // DDP's buckets: parameters in reverse registration order (roughly the order their
    // gradients complete), the first bucket small so the first reduction starts early.
    int64_t cap = std::min<int64_t>(int64_t{1} << 20, options.bucket_bytes), bytes = 0;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (!it->requires_grad() || !owner.count(it->unsafeGetTensorImpl())) continue;
      if (by_flat.empty() || bytes >= cap) {
        if (!by_flat.empty()) cap = options.bucket_bytes;
        by_flat.emplace_back();
        flat_names.push_back(str("bucket", by_flat.size() - 1));
        bytes = 0;
      }
      by_flat.back().push_back(*it);
      bytes += it->numel() * 4;
    }
  }
  for (const auto& item : root.named_buffers(/*recurse=*/true)) {
    bool seen = false;
    for (const auto& [name, t] : unsharded) seen = seen || t.is_same(item.value());
    if (!seen) unsharded.emplace_back(item.key(), item.value());
  }

  comm::Communicator* shard = options.groups.shard;
  const int group = shard ? shard->size() : 1, group_rank = shard ? shard->rank() : 0;
  std::unordered_map<const c10::TensorImpl*, size_t> root_order;
  for (size_t i = 0; i < params.size(); ++i) root_order[params[i].unsafeGetTensorImpl()] = i;
  std::vector<size_t> piece_rank;  // each piece's parameter's position in the root's order
  for (size_t k = 0; k < by_flat.size(); ++k) {
    std::vector<std::string> names;
    for (const auto& p : by_flat[k]) names.push_back(param_name[p.unsafeGetTensorImpl()]);
    flats.push_back(std::make_unique<FlatParam>(flat_names[k], names, by_flat[k], group, group_rank,
                                                options.mixed_precision.param_dtype, zero1()));
    FlatParam& f = *flats.back();
    auto st = std::make_unique<FlatState>();
    for (auto& p : f.params) {
      auto acc = torch::autograd::impl::grad_accumulator(p);
      CADRE_CHECK(acc, "FSDP unit ", f.unit, ": no gradient accumulator for a parameter");
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (--state_[k]->pending == 0) grads_ready(k);
            return outputs;
          }));
      st->accumulators.push_back(std::move(acc));
    }
    st->pending = static_cast<int64_t>(f.params.size());
    state_.push_back(std::move(st));
    // The optimizer's view: the part of each parameter inside this rank's shard.
    for (size_t i = 0; i < f.params.size(); ++i) {
      const int64_t lo = std::max(f.offsets[i], f.shard_offset);
      const int64_t hi = std::min(f.offsets[i] + f.numels[i], f.shard_offset + f.shard_numel);
      if (lo >= hi) continue;
      at::Tensor piece = f.master.narrow(0, lo - f.shard_offset, hi - lo);
      // Not a view (optimizers detach_() gradients, which views refuse) but the same bytes:
      // grad_shard's storage is never resized (ZeRO-1: nor grad_full's, which holds it), and
      // the deleter keeps it alive.
      at::Tensor grad = at::from_blob(static_cast<char*>(f.grad_shard.data_ptr()) +
                                          (lo - f.shard_offset) * f.grad_shard.element_size(),
                                      {hi - lo}, [keep = f.grad_shard](void*) {}, f.grad_shard.options());
      piece.mutable_grad() = grad;
      pieces.push_back(piece);
      piece_grads_.push_back(grad);
      piece_decay.push_back(f.params[i].dim() >= 2);  // matrices and kernels; not norms, biases
      piece_where_.emplace_back(k, lo - f.shard_offset);
      piece_layout.push_back({k, f.names[i], f.params[i].sizes().vec(), lo - f.offsets[i]});
      piece_rank.push_back(root_order.at(f.params[i].unsafeGetTensorImpl()));
    }
    // Sharded at rest (with a one-rank group the gradient buffer is the shard's: it stays).
    if (free_after_backward_ && !f.master_is_full()) f.full_free();
    if (free_after_backward_ && !f.grad_shard.is_same(f.grad_full)) f.grad_free();
  }
  piece_norm_order_.resize(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) piece_norm_order_[k] = k;
  std::stable_sort(piece_norm_order_.begin(), piece_norm_order_.end(),
                   [&](size_t a, size_t b) { return piece_rank[a] < piece_rank[b]; });
  order_pos_.assign(units.size(), -1);
}

void FsdpTree::gather_start(size_t k) {
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (st.gather_pending || (f.full_allocated() && !st.stale)) return;
  st.stale = false;
  f.full_allocate();
  if (f.master_is_full()) return;
  c10::NoGradGuard no_grad;
  if (!options.groups.shard) {
    f.full.copy_(f.master);
    return;
  }
  st.gather_send = f.master.to(options.mixed_precision.param_dtype);
  st.gather_work = options.groups.shard->all_gather_async(f.full, st.gather_send);
  st.gather_pending = true;
}

void FsdpTree::gather_wait(size_t k) {
  gather_start(k);
  FlatState& st = *state_[k];
  if (st.gather_pending) {
    try {
      st.gather_work.wait();
    } catch (const std::exception& e) {
      throw Error(str("FSDP unit ", flats[k]->unit, ": gathering its parameters failed: ", e.what()));
    }
    st.gather_pending = false;
    st.gather_send = at::Tensor();
  }
  note_working_set();
}

void FsdpTree::reshard(size_t k) {
  FlatParam& f = *flats[k];
  if (f.master_is_full() || !f.full_allocated() || keeps_full()) return;
  if (state_[k]->gather_pending) gather_wait(k);
  f.full_free();
}

void FsdpTree::pre_forward(Unit& u) {
  if (&u == units.back().get()) {
    root_pre_forward();
    return;
  }
  CADRE_CHECK(forward_active_, "FSDP unit '", u.name.empty() ? "?" : u.name,
              "' was called outside the forward of its root module; call the root through cadre::call");
  if (u.entered++ == 0) {
    order_pos_[u.index] = static_cast<int64_t>(order_cur_.size());
    order_cur_.push_back(u.index);
  }
  if (u.flat < 0) return;
  gather_wait(static_cast<size_t>(u.flat));
  // Forward prefetch: the unit that came next in the last forward.
  const size_t pos = static_cast<size_t>(order_pos_[u.index]);
  if (options.prefetch && pos + 1 < order_prev_.size()) {
    int next = units[order_prev_[pos + 1]]->flat;
    if (next >= 0 && next != u.flat) gather_start(static_cast<size_t>(next));
  }
}

void FsdpTree::root_pre_forward() {
  ensure_init();
  forward_active_ = true;  // also after a forward that threw: a new root call starts afresh
  for (auto& u : units) u->entered = 0;
  if (!order_cur_.empty()) order_prev_ = std::move(order_cur_);
  order_cur_.clear();
  order_pos_.assign(units.size(), -1);
  const bool grad = at::GradMode::is_enabled();
  if (grad) {
    // ZeRO-1: a reduced gradient was the last step's (its own block reduced in place, the rest
    // this rank's unreduced values): a training forward after it starts from zero, whether or
    // not the caller zeroed the optimizer's view. Accumulation spans micro-batches under
    // no_sync(), which never reduce.
    for (size_t k = 0; k < flats.size(); ++k)
      if (state_[k]->reduced) {
        flats[k]->grad_full.zero_();
        state_[k]->reduced = false;
      }
    relink_grads();
    if (options.broadcast_buffers && root_->is_training()) broadcast_buffers();
  }
  if (!sharded()) {
    for (size_t k = 0; k < flats.size(); ++k) gather_wait(k);  // refreshes stale compute copies
    return;
  }
  // The root's parameters are used first and last (an embedding, a head): it stays gathered
  // from the start of the forward to the end of the backward, as in PyTorch FSDP.
  int root_flat = units.back()->flat;
  if (root_flat >= 0) {
    gather_wait(static_cast<size_t>(root_flat));
    if (grad) flats[root_flat]->grad_allocate_zero();
  }
  if (options.prefetch && !order_prev_.empty()) {
    int next = units[order_prev_[0]]->flat;
    if (next >= 0) gather_start(static_cast<size_t>(next));
  }
}

void FsdpTree::post_forward(Unit& u, const std::vector<at::Tensor>& outputs) {
  const bool grad = at::GradMode::is_enabled();
  if (&u == units.back().get()) {
    forward_active_ = false;
    if (grad) hook_outputs(u.index, outputs);
    else
      for (size_t k = 0; k < flats.size(); ++k) reshard(k);  // inference: nothing stays gathered
    return;
  }
  if (grad) hook_outputs(u.index, outputs);
  const bool group_done = u.entered % static_cast<int64_t>(u.modules.size()) == 0;
  if (u.flat >= 0 && group_done && (free_after_forward_ || !grad)) reshard(static_cast<size_t>(u.flat));
}

void FsdpTree::hook_outputs(size_t u, const std::vector<at::Tensor>& outputs) {
  for (const auto& out : outputs)
    if (out.defined() && out.requires_grad()) out.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
}

// Runs when the gradient of one of the unit's outputs is ready, right before its backward.
void FsdpTree::pre_backward(size_t u) {
  ensure_final_callback();
  int k = units[u]->flat;
  if (k >= 0) {
    gather_wait(static_cast<size_t>(k));
    flats[k]->grad_allocate_zero();
  }
  // Backward prefetch: the unit that ran before this one in the forward runs next now (after
  // the root's outputs, the last unit of the forward).
  const int64_t pos = u + 1 == units.size() ? static_cast<int64_t>(order_cur_.size()) : order_pos_[u];
  if (options.prefetch && pos > 0) {
    int prev = units[order_cur_[pos - 1]]->flat;
    if (prev >= 0) gather_start(static_cast<size_t>(prev));
  }
  note_working_set();
}

void FsdpTree::ensure_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

// Runs when the last of a flat parameter's gradients was accumulated.
void FsdpTree::grads_ready(size_t k) {
  ensure_final_callback();
  FlatState& st = *state_[k];
  st.ready = true;
  note_working_set();
  if (!sharded()) {
    // Buckets launch in index order on every rank, whatever order they complete in.
    while (reduce_now && next_bucket_ < flats.size() && state_[next_bucket_]->ready) start_reduce(next_bucket_++);
    return;
  }
  if (reduce_now) {
    // Bound the unsharded gradients alive at once: fold in reductions that finished, and wait
    // for all but the newest one (one unit's reduction overlaps the next unit's backward).
    while (!reducing_.empty() && (reducing_.size() > 1 || state_[reducing_.front()]->reduce_work.done())) {
      reduce_finish(reducing_.front());
      reducing_.pop_front();
    }
    start_reduce(k);
  }
  // During accumulation SHARD_GRAD_OP keeps the unit gathered: no communication at all until
  // the last micro-batch. FULL_SHARD frees it (it is gathered again for the next forward).
  if (free_after_forward_ || (free_after_backward_ && reduce_now)) reshard(k);
}

void FsdpTree::start_reduce(size_t k) {
  c10::NoGradGuard no_grad;
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (zero1()) {
    // The shard's gradient is reduced into its own block of the whole gradient, in place; the
    // other blocks keep this rank's unreduced values until the next training forward clears
    // the buffer (root_pre_forward).
    st.reduced = true;
    if (!options.groups.shard) return;  // one rank: the gradient is final as it is
  }
  st.reduce_in = f.grad_full.to(options.mixed_precision.reduce_dtype);  // the buffer itself when the dtypes agree
  if (zero1()) {
    st.reduce_out = st.reduce_in.is_same(f.grad_full) ? f.grad_shard : at::empty({f.shard_numel}, st.reduce_in.options());
    st.reduce_work = options.groups.shard->reduce_scatter_async(st.reduce_out, st.reduce_in, comm::ReduceOp::Avg);
  } else if (options.groups.shard) {
    st.reduce_out = at::empty({f.shard_numel}, st.reduce_in.options());
    st.reduce_work = options.groups.shard->reduce_scatter_async(st.reduce_out, st.reduce_in, comm::ReduceOp::Avg);
  } else if (options.groups.replica) {
    st.reduce_out = st.reduce_in;
    st.reduce_work = options.groups.replica->all_reduce_async(st.reduce_in, comm::ReduceOp::Avg);
  } else {
    st.reduce_out = st.reduce_in;
    return;  // one rank: the gradient is final; reduce_finish copies a low-precision one back
  }
  st.reduce_pending = true;
  reducing_.push_back(k);
}

// Waits for flat k's reduction and folds it into its float32 shard; frees the unsharded gradient.
void FsdpTree::reduce_finish(size_t k) {
  c10::NoGradGuard no_grad;
  FlatParam& f = *flats[k];
  FlatState& st = *state_[k];
  if (st.reduce_pending) {
    try {
      st.reduce_work.wait();
    } catch (const std::exception& e) {
      throw Error(str("FSDP unit ", f.unit, ": reducing its gradients failed: ", e.what()));
    }
    st.reduce_pending = false;
  }
  if (!st.reduce_out.defined()) return;
  if (zero1()) {
    // A reduction in another dtype lands in the shard's block; a whole one-rank gradient
    // converted for nothing is simply dropped.
    if (options.groups.shard && !st.reduce_out.is_same(f.grad_shard)) f.grad_shard.copy_(st.reduce_out);
  } else if (options.groups.shard) {
    if (options.groups.replica) options.groups.replica->all_reduce(st.reduce_out, comm::ReduceOp::Avg);
    f.grad_shard.add_(st.reduce_out.to(at::kFloat));
    f.grad_free();
  } else if (!st.reduce_out.is_same(f.grad_full)) {
    f.grad_full.copy_(st.reduce_out);
  }
  st.reduce_in = st.reduce_out = at::Tensor();
}

void FsdpTree::finish_backward() {
  if (!callback_queued_) return;  // no backward reached this tree since the last finish
  callback_queued_ = false;
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < flats.size(); ++k) {
    FlatParam& f = *flats[k];
    FlatState& st = *state_[k];
    CADRE_CHECK(st.ready, "FSDP unit ", f.unit, ": ", st.pending, " of its ", f.params.size(),
                " parameter gradients never arrived in the backward (first parameter ", f.names[0],
                "); every parameter that requires grad must take part in the loss");
    st.ready = false;
    st.pending = static_cast<int64_t>(f.params.size());
  }
  if (!reduce_now) return;  // accumulating: the gradients stay unsharded until the last micro-batch
  if (!sharded())
    while (next_bucket_ < flats.size()) start_reduce(next_bucket_++);
  next_bucket_ = 0;
  for (size_t k : reducing_) reduce_finish(k);
  reducing_.clear();
  // Without a group nothing was in flight; a low-precision reduction still lands in float32.
  for (size_t k = 0; k < flats.size(); ++k) reduce_finish(k);
  mark_updated();  // an optimizer step comes next: compute copies refresh at the next gather
}

void FsdpTree::relink_grads() {
  // Optimizers that "zero" gradients by dropping them (set_to_none, libtorch 2.x's default)
  // cut the views into the flat gradient buffers: the dropped part counts as zero.
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (pieces[k].grad().defined() && pieces[k].grad().is_same(piece_grads_[k])) continue;
    piece_grads_[k].zero_();
    pieces[k].mutable_grad() = piece_grads_[k];
  }
  for (auto& f : flats) f->relink_grads();
}

void FsdpTree::broadcast_buffers() {
  // Rank 0's values: it is index 0 of its replica group and of its shard group, so a broadcast
  // over replicas, then over the shard group, reaches everyone. Coalesced per dtype.
  std::vector<comm::Communicator*> hops;
  if (options.groups.replica) hops.push_back(options.groups.replica);
  if (options.groups.shard) hops.push_back(options.groups.shard);
  if (hops.empty()) return;
  c10::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& [name, t] : unsharded)
    if (!t.requires_grad()) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, tensors] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    for (auto* group : hops) group->broadcast(packed, 0);
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void FsdpTree::zero_grad() {
  for (size_t k = 0; k < flats.size(); ++k) {
    FlatParam& f = *flats[k];
    f.grad_shard.zero_();
    if (f.grad_allocated()) f.grad_full.zero_();
    state_[k]->reduced = false;
  }
}

double FsdpTree::clip_grad_norm(double max_norm) {
  // Per-parameter norms summed in the root's parameter order (as torch's clip_grad_norm_), so
  // the figure does not depend on how parameters are grouped into units or buckets.
  // Under tensor parallelism a split parameter's square adds over the tensor-parallel ranks,
  // a replicated one (the same gradient on each of them) counts once.
  const TensorParallelLayout* tp = options.tensor_parallel.get();
  std::vector<at::Tensor> split, whole;
  for (size_t k : piece_norm_order_) {
    const Placement* where = tp ? tp->find(piece_layout[k].name) : nullptr;
    (where && !where->replicated ? split : whole).push_back(piece_grads_[k]);
  }
  double sq = grad_sq_norm(whole);
  if (tp && tp->group) {
    at::Tensor t = at::scalar_tensor(grad_sq_norm(split), at::kFloat).reshape({1});
    tp->group->all_reduce(t, comm::ReduceOp::Sum);
    sq += t.item<double>();
  } else {
    sq += grad_sq_norm(split);
  }
  std::vector<at::Tensor> grads;
  for (auto& f : flats) grads.push_back(f->grad_shard);
  if (options.groups.shard) {
    // Replicas hold equal shards: the sum runs over one shard group only.
    at::Tensor t = at::scalar_tensor(sq, at::kFloat).reshape({1});
    options.groups.shard->all_reduce(t, comm::ReduceOp::Sum);
    sq = t.item<double>();
  }
  double norm = std::sqrt(sq);
  grad_clip_scale(grads, norm, max_norm);
  return norm;
}

bool FsdpTree::replicas_identical() {
  c10::NoGradGuard no_grad;
  bool same = true;
  std::vector<comm::Communicator*> groups;
  if (options.groups.shard) groups.push_back(options.groups.shard);
  if (options.groups.replica) groups.push_back(options.groups.replica);
  for (auto& f : flats) {
    at::Tensor full = f->master;
    if (options.groups.shard) {
      full = at::empty({f->padded}, at::kFloat);
      options.groups.shard->all_gather(full, f->master.contiguous());
    }
    // Every rank's values equal the maximum over all ranks exactly when all agree.
    at::Tensor highest = full.clone();
    for (auto* g : groups) g->all_reduce(highest, comm::ReduceOp::Max);
    same = same && at::equal(full, highest);
  }
  at::Tensor differs = at::scalar_tensor(int64_t(same ? 0 : 1), at::kLong).reshape({1});
  for (auto* g : groups) g->all_reduce(differs, comm::ReduceOp::Max);
  return differs.item<int64_t>() == 0;
}

void FsdpTree::note_working_set() {
  int64_t bytes = 0;
  for (auto& f : flats) {
    if (!f->master_is_full() && f->full_allocated()) bytes += f->full_bytes();
    if (!f->grad_shard.is_same(f->grad_full) && f->grad_allocated()) bytes += f->grad_bytes();
  }
  peak_working_ = std::max(peak_working_, bytes);
}

ShardMemory FsdpTree::memory() const {
  ShardMemory m;
  m.shard_size = options.groups.shard ? options.groups.shard->size() : 1;
  m.peak_working = peak_working_;
  m.units = units_with_params_;
  m.flat_params = static_cast<int64_t>(flats.size());
  for (auto& f : flats) {
    m.padded_numel += f->padded;
    // What stays allocated between steps, each buffer once: the float32 master and a compute
    // copy kept whole (NO_SHARD and ZeRO-1 in bf16; ZeRO-1's float32 master is part of it),
    // the reduced gradient shard and a gradient kept whole (NO_SHARD, ZeRO-1).
    const bool full_at_rest = f->master_in_full() || !free_after_backward_;
    m.params += (f->master_in_full() ? 0 : f->shard_numel * 4) + (full_at_rest ? f->full_bytes() : 0);
    const bool grad_at_rest = f->grad_shard_in_full() || !free_after_backward_;
    m.grads += (f->grad_shard_in_full() ? 0 : f->shard_numel * static_cast<int64_t>(f->grad_shard.element_size())) +
               (grad_at_rest ? f->grad_bytes() : 0);
  }
  return m;
}

}  // namespace detail

using detail::FsdpTree;
using detail::Unit;
using detail::TreeOwner;
using detail::kStateChild;

namespace {

bool same_options(const FullyShardOptions& a, const FullyShardOptions& b) {
  return a.strategy == b.strategy && a.groups.shard == b.groups.shard && a.groups.replica == b.groups.replica &&
         a.tensor_parallel == b.tensor_parallel &&
         a.mixed_precision.param_dtype == b.mixed_precision.param_dtype &&
         a.mixed_precision.reduce_dtype == b.mixed_precision.reduce_dtype;
}

}  // namespace

FSDPModule fully_shard(const std::vector<torch::nn::Module*>& modules, const FullyShardOptions& options) {
  CADRE_CHECK(!modules.empty(), "fully_shard: no modules given");
  auto tree = std::make_shared<FsdpTree>(options);
  auto& registry = detail::unit_registry();
  // The trees taken in stay alive until the lock is released: re-pointing their modules'
  // owners drops what may be their last references.
  std::vector<std::shared_ptr<FsdpTree>> inner;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto* m : modules)
      CADRE_CHECK(!registry.units.count(m), "fully_shard: module '", m->name(), "' is already an FSDP unit");
    // Take in the units already created under these modules, in their trees' order.
    for (const auto* m : detail::subtree(modules)) {
      auto it = registry.units.find(m);
      if (it == registry.units.end()) continue;
      std::shared_ptr<FsdpTree> t = it->second->owners.front()->tree;
      if (std::find(inner.begin(), inner.end(), t) == inner.end()) inner.push_back(t);
    }
    for (const auto& t : inner) {
      CADRE_CHECK(t->flats.empty(), "fully_shard: units under '", modules[0]->name(),
                  "' were already used (their tree ran a forward); shard the root before the first forward");
      CADRE_CHECK(same_options(t->options, options), "fully_shard: a unit under '", modules[0]->name(),
                  "' has another strategy, mesh or mixed precision; one FSDP tree uses one setting");
      for (auto& u : t->units) {
        u->tree = tree.get();
        for (TreeOwner* owner : u->owners) owner->tree = tree;
        tree->units.push_back(std::move(u));
      }
      t->units.clear();
      t->absorbed = true;
    }
    // Creation order, the same on every rank; a unit is always created before the units
    // that enclose it, so inner units come first.
    std::sort(tree->units.begin(), tree->units.end(),
              [](const std::unique_ptr<Unit>& a, const std::unique_ptr<Unit>& b) { return a->seq < b->seq; });
  }
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
    hooks.pre = [raw] { raw->tree->pre_forward(*raw); };
    hooks.post = [raw](const std::vector<at::Tensor>& outputs) { raw->tree->post_forward(*raw, outputs); };
    unit->hooks.push_back(register_forward_hooks(*m, std::move(hooks)));
  }
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
int FSDPModule::replica_count() {
  auto* r = tree().options.groups.replica;
  return r ? r->size() : 1;
}
int FSDPModule::replica_index() {
  auto* r = tree().options.groups.replica;
  return r ? r->rank() : 0;
}
std::vector<std::pair<std::string, at::Tensor>> FSDPModule::unsharded_state() { return tree().unsharded; }
ShardMemory FSDPModule::memory() { return tree().memory(); }
const TensorParallelLayout* FSDPModule::tensor_parallel() { return tree().options.tensor_parallel.get(); }
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
