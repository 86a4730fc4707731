// Forward hooks for libtorch C++ modules, which have none of their own (Python's nn.Module
// runs hooks in __call__). `cadre::call(module, args...)` is the C++ spelling of Python's
// `module(*args)`: it runs the hooks registered on that module object around its forward.
// FSDP units gather their parameters before the forward and reshard after it; activation
// checkpointing runs the forward without keeping activations and recomputes it in backward.
// A module with no hooks registered is simply called, so `call` is free to use everywhere.
//
//   x = cadre::call(block, x);                   // instead of x = block->forward(x)
//   x = cadre::call_sequential(features, x);     // a torch::nn::Sequential, child by child
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <array>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace cadre {

struct ForwardHooks {
  // Before the forward, with the forward's tensor arguments (e.g. gather a unit's parameters,
  // and hook the inputs' gradients to learn when the backward is done with the unit).
  std::function<void(const std::vector<at::Tensor>& inputs)> pre;
  // After the forward, with the forward's tensor outputs (e.g. reshard, and hook the outputs'
  // gradients to gather again before this module's backward).
  std::function<void(const std::vector<at::Tensor>& outputs)> post;
};

// Registration handle: removes the hooks when destroyed.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(const torch::nn::Module* module, uint64_t id) : module_(module), id_(id) {}
  HookHandle(HookHandle&& other) noexcept { *this = std::move(other); }
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle();

 private:
  const torch::nn::Module* module_ = nullptr;
  uint64_t id_ = 0;
};

// Hooks run in registration order (pre) and reverse order (post).
HookHandle register_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks);

// Marks the module for activation checkpointing: cadre::call runs its forward without keeping
// intermediate activations and recomputes them in backward (PyTorch's re-entrant checkpoint,
// CPU RNG state preserved). The forward must return a tensor. Undone when the handle dies.
HookHandle checkpoint_wrapper(const torch::nn::Module& module);

namespace detail {

struct HookSet {
  std::vector<std::pair<uint64_t, ForwardHooks>> hooks;
  int checkpoint = 0;  // checkpoint_wrapper registrations
};
// Null when the module has neither hooks nor checkpointing: the common, fast case.
const HookSet* hooks_find(const torch::nn::Module& module);
void hooks_run_pre(const HookSet& set, const std::vector<at::Tensor>& inputs);
void hooks_run_post(const HookSet& set, const std::vector<at::Tensor>& outputs);

// Runs `fn(inputs)` under activation checkpointing: inputs that require grad get gradients
// through the recomputation in backward, and so do the parameters `fn` reads when
// `parameters_train()` (the module has parameters that require grad), even if no input does;
// it is asked only then, off the common path.
at::Tensor checkpoint_apply(std::function<at::Tensor(const std::vector<at::Tensor>&)> fn,
                            const std::vector<at::Tensor>& inputs, const std::function<bool()>& parameters_train);
// Some parameter of the module (or of a module inside it) requires grad.
bool has_trainable_parameters(const torch::nn::Module& module);

template <typename M>
torch::nn::Module& module_of(M& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, std::decay_t<M>>) return m;
  else return *m;  // std::shared_ptr<Impl>, Impl*, or a torch::nn::ModuleHolder
}

inline void collect(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
inline void collect(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename... Ts>
void collect(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... items) { (collect(items, out), ...); }, t);
}
template <typename T>
void collect(const T&, std::vector<at::Tensor>&) {}  // non-tensor outputs carry no gradient

template <typename T>
constexpr bool is_tensor = std::is_same_v<std::decay_t<T>, at::Tensor>;

// Position of each argument among the tensor arguments (only meaningful for tensors).
template <typename... Args>
constexpr std::array<size_t, sizeof...(Args)> tensor_slots() {
  std::array<size_t, sizeof...(Args)> slots{};
  constexpr bool flags[] = {is_tensor<Args>..., false};
  size_t next = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) slots[i] = flags[i] ? next++ : 0;
  return slots;
}

template <typename T>
decltype(auto) pick(const T& stored, const std::vector<at::Tensor>& tensors, size_t slot) {
  if constexpr (is_tensor<T>) return tensors[slot];
  else return (stored);
}

template <typename M, typename Stored, size_t... I>
at::Tensor forward_substituted(M& module, const Stored& stored, const std::vector<at::Tensor>& tensors,
                               std::index_sequence<I...>) {
  constexpr auto slots = tensor_slots<std::tuple_element_t<I, Stored>...>();
  return module->forward(pick(std::get<I>(stored), tensors, slots[I])...);
}

template <typename M, typename... Args>
at::Tensor call_checkpointed(const M& module, const std::function<bool()>& parameters_train, Args&&... args) {
  std::vector<at::Tensor> tensors;
  auto add = [&](const auto& a) {
    if constexpr (is_tensor<decltype(a)>) tensors.push_back(a);
  };
  (add(args), ...);
  // The recomputation in backward runs after the caller's frame is gone: it keeps copies of
  // the module handle and of the non-tensor arguments; tensor arguments travel through autograd.
  using Stored = std::tuple<std::decay_t<Args>...>;
  auto stored = std::make_shared<Stored>(std::forward<Args>(args)...);
  auto fn = [module, stored](const std::vector<at::Tensor>& ts) mutable -> at::Tensor {
    return forward_substituted(module, *stored, ts, std::index_sequence_for<Args...>{});
  };
  return checkpoint_apply(std::move(fn), tensors, parameters_train);
}

}  // namespace detail

// module->forward(args...) with the module's hooks around it. `module` is a
// std::shared_ptr<Impl>, an Impl*, a torch::nn::ModuleHolder (TORCH_MODULE): anything with
// ->forward. Under activation checkpointing a copy of it is kept for the recomputation.
template <typename M, typename... Args>
auto call(M&& module, Args&&... args) -> decltype(module->forward(std::forward<Args>(args)...)) {
  const detail::HookSet* set = detail::hooks_find(detail::module_of(module));
  if (!set) return module->forward(std::forward<Args>(args)...);
  std::vector<at::Tensor> inputs;
  (detail::collect(args, inputs), ...);
  detail::hooks_run_pre(*set, inputs);
  using Out = decltype(module->forward(std::forward<Args>(args)...));
  Out out = [&]() -> Out {
    if (set->checkpoint > 0) {
      if constexpr (std::is_same_v<std::decay_t<Out>, at::Tensor>)
        return detail::call_checkpointed(
            std::decay_t<M>(module), [&] { return detail::has_trainable_parameters(detail::module_of(module)); },
            std::forward<Args>(args)...);
      else
        throw std::invalid_argument("checkpoint_wrapper: the module's forward must return a tensor");
    }
    return module->forward(std::forward<Args>(args)...);
  }();
  std::vector<at::Tensor> tensors;
  detail::collect(out, tensors);
  detail::hooks_run_post(*set, tensors);
  return out;
}

// A torch::nn::Sequential's forward, each child through its hooks (children must map one
// tensor to one tensor, as Sequential's own forward chains them).
at::Tensor call_sequential(torch::nn::Sequential& sequential, at::Tensor x);

}  // namespace cadre
