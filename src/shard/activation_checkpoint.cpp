// Re-entrant activation checkpoint as a torch::autograd::Function over any forward.
#include "shard/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using CheckpointedFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void cpu_rng_restore(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The recomputation closure rides in the autograd context as a capsule, so it is released with
// the graph whether or not the backward ever runs.
struct ClosureCapsule : torch::CustomClassHolder {
  explicit ClosureCapsule(std::shared_ptr<CheckpointedFn> f) : fn(std::move(f)) {}
  std::shared_ptr<CheckpointedFn> fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, std::shared_ptr<CheckpointedFn> fn) {
    // Dropout and other random ops must draw the same numbers when recomputed.
    ctx->saved_data["rng"] = cpu_rng_state();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(c10::make_intrusive<ClosureCapsule>(fn));
    ctx->save_for_backward(inputs.vec());
    c10::NoGradGuard no_grad;
    return (*fn)(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto capsule = ctx->saved_data["fn"].toCapsule();
    const CheckpointedFn& fn = *static_cast<ClosureCapsule*>(capsule.get())->fn;
    std::vector<at::Tensor> inputs;
    for (const auto& saved : ctx->get_saved_variables()) {
      at::Tensor x = saved.defined() ? saved.detach() : saved;
      if (saved.defined() && saved.requires_grad()) x.requires_grad_(true);
      inputs.push_back(x);
    }
    at::Tensor out;
    {
      at::Tensor rng_now = cpu_rng_state();
      cpu_rng_restore(ctx->saved_data["rng"].toTensor());
      torch::autograd::AutoGradMode on(true);
      out = fn(inputs);
      cpu_rng_restore(rng_now);
    }
    // Accumulates into the parameters' .grad through their usual AccumulateGrad nodes, so
    // FSDP's post-backward hooks fire as without checkpointing.
    if (out.requires_grad()) torch::autograd::backward({out}, {grad_out[0]});
    variable_list grads;
    for (const auto& x : inputs) grads.push_back(x.defined() && x.requires_grad() ? x.grad() : at::Tensor());
    grads.push_back(at::Tensor());  // for fn
    return grads;
  }
};

}  // namespace

namespace detail {

at::Tensor checkpoint_apply(std::function<at::Tensor(const std::vector<at::Tensor>&)> fn,
                            const std::vector<at::Tensor>& inputs, const std::function<bool()>& parameters_train) {
  if (!at::GradMode::is_enabled()) return fn(inputs);  // nothing to save in inference
  // libtorch 2.x's autograd Function refuses an undefined input (it records each input's
  // device), and a forward may take one (Llama's blocks get no mask under SDPA): only the
  // defined inputs go through the Function, and the closure puts the others back in place.
  std::vector<at::Tensor> defined;
  std::vector<size_t> positions;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) {
      defined.push_back(inputs[i]);
      positions.push_back(i);
    }
  // A Function whose inputs need no gradient records no backward, so the parameters inside
  // would get none (torch's re-entrant checkpoint warns "None of the inputs have
  // requires_grad=True"): behind frozen layers (train.freeze) a trainable block's input needs no
  // gradient. An empty tensor that requires grad goes in beside the inputs, never to `fn`, so
  // the backward runs.
  bool any_input_trains = false;
  for (const auto& x : defined) any_input_trains = any_input_trains || x.requires_grad();
  if (!any_input_trains && parameters_train()) {
    const at::TensorOptions on = defined.empty() ? at::TensorOptions() : at::TensorOptions().device(defined[0].device());
    defined.push_back(at::empty({0}, on).requires_grad_(true));
  }
  auto shared = std::make_shared<CheckpointedFn>(
      [fn = std::move(fn), positions, count = inputs.size()](const std::vector<at::Tensor>& given) {
        std::vector<at::Tensor> all(count);
        for (size_t k = 0; k < positions.size(); ++k) all[positions[k]] = given[k];
        return fn(all);
      });
  return CheckpointFunction::apply(at::TensorList(defined), shared);
}

bool has_trainable_parameters(const torch::nn::Module& module) {
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace detail

std::vector<HookHandle> apply_activation_checkpointing(torch::nn::Module& root, const WrapPolicy& policy) {
  std::vector<HookHandle> handles;
  for (torch::nn::Module* m : wrap_select(root, policy)) handles.push_back(checkpoint_wrapper(*m));
  return handles;
}

}  // namespace cadre
