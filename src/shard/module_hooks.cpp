// The registry of forward hooks per module object.
#include "shard/module_hooks.h"

#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace cadre {
namespace {

// Keyed by module address. Modules are registered while a model is set up and looked up on
// every call; the lock is uncontended (one training thread).
struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, detail::HookSet> sets;
  uint64_t next_id = 1;
};

Registry& registry() {
  static Registry r;
  return r;
}

constexpr uint64_t kCheckpointBit = uint64_t{1} << 63;

void hooks_remove(const torch::nn::Module* module, uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sets.find(module);
  if (it == r.sets.end()) return;
  detail::HookSet& set = it->second;
  if (id & kCheckpointBit) {
    --set.checkpoint;
  } else {
    for (auto h = set.hooks.begin(); h != set.hooks.end(); ++h)
      if (h->first == id) {
        set.hooks.erase(h);
        break;
      }
  }
  if (set.hooks.empty() && set.checkpoint == 0) r.sets.erase(it);
}

}  // namespace

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    if (module_) hooks_remove(module_, id_);
    module_ = other.module_;
    id_ = other.id_;
    other.module_ = nullptr;
  }
  return *this;
}

HookHandle::~HookHandle() {
  if (module_) hooks_remove(module_, id_);
}

HookHandle register_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uint64_t id = r.next_id++;
  r.sets[&module].hooks.emplace_back(id, std::move(hooks));
  return HookHandle(&module, id);
}

HookHandle checkpoint_wrapper(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ++r.sets[&module].checkpoint;
  return HookHandle(&module, kCheckpointBit | r.next_id++);
}

namespace detail {

const HookSet* hooks_find(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sets.find(&module);
  return it == r.sets.end() ? nullptr : &it->second;
}

void hooks_run_pre(const HookSet& set, const std::vector<at::Tensor>& inputs) {
  for (const auto& [id, h] : set.hooks)
    if (h.pre) h.pre(inputs);
}

void hooks_run_post(const HookSet& set, const std::vector<at::Tensor>& outputs) {
  for (auto it = set.hooks.rbegin(); it != set.hooks.rend(); ++it)
    if (it->second.post) it->second.post(outputs);
}

}  // namespace detail

at::Tensor call_sequential(torch::nn::Sequential& sequential, at::Tensor x) {
  for (auto& child : *sequential) {
    torch::nn::Module& m = *child.ptr();
    const detail::HookSet* set = detail::hooks_find(m);
    if (!set) {
      x = child.forward(x);
      continue;
    }
    CADRE_CHECK(set->checkpoint == 0, "call_sequential: checkpoint_wrapper on a Sequential child (",
                m.name(), ") is not supported; wrap the Sequential itself");
    hooks_run_pre(*set, {x});
    x = child.forward(x);
    hooks_run_post(*set, {x});
  }
  return x;
}

}  // namespace cadre
