// The fused CPU kernels of models/ (RMSNorm, SwiGLU, RoPE, causal softmax, cross-entropy) against the same
// functions through libtorch's ops, forward and backward, at the shapes of one rank's step of the
// small Llama (configs/small.yaml: batch 8 x 256 tokens, dim 512, 8 heads, FFN 1536, vocab 8192):
// milliseconds per call (best of the repeats), the ratio, and the calls a step makes. Both
// sides allocate through the CPU block cache, as training does.
//
//   fused_kernels [--threads 1] [--dtype bfloat16|float32] [--repeats 10] [--caches warm|cold]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cpu_block_cache.h"
#include "models/fused_causal_softmax.h"
#include "models/fused_cross_entropy.h"
#include "models/fused_rms_norm.h"
#include "models/fused_rope.h"
#include "models/fused_swiglu.h"

namespace {

using Inputs = std::vector<at::Tensor>;
using Function = std::function<at::Tensor(const Inputs&)>;

// Page faults (minor) of this process so far: a composite's fresh float32 copies fault in pages
// the block cache cannot serve when its sizes change.
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct Timing {
  double best_ms = 1e30;  // one forward and backward, the best of the repeats
  long faults = 0;        // page faults per call, on average
};

// Writes a buffer larger than the last-level cache, so that the next call finds its inputs in
// memory, as in a training step (each op's input was written by the op before, megabytes ago).
void evict_caches() {
  static at::Tensor sweep = at::empty({64 << 20}, at::kByte);
  sweep.add_(1);
}

Timing time_calls(const Function& f, const Inputs& inputs, int repeats, bool cold) {
  Timing t;
  for (int r = 0; r <= repeats; ++r) {  // the first is warm-up
    if (cold) evict_caches();
    const long f0 = minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor y = f(inputs);
    at::Tensor g = y.dim() == 0 ? at::ones_like(y) : at::full_like(y, 0.5);
    torch::autograd::grad({y}, inputs, {g});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) continue;
    t.best_ms = std::min(t.best_ms, ms);
    t.faults += minor_faults() - f0;
  }
  t.faults /= repeats;
  return t;
}

struct Case {
  std::string name;
  int calls_per_step;
  Inputs inputs;  // the differentiable ones first
  Function fused, composite;
};

std::vector<Case> cases(at::ScalarType dtype) {
  const int64_t B = 8, T = 256, D = 512, H = 8, F = 1536, V = 8192;
  auto leaf = [&](std::vector<int64_t> shape) { return at::randn(shape).to(dtype).requires_grad_(true); };
  const at::Tensor cos = at::rand({T, D / H}).to(dtype), sin = at::rand({T, D / H}).to(dtype);
  const at::Tensor targets = at::randint(V, {B * T}, at::kLong);
  // q as the attention makes it: [B, T, H, hd] from the projection, viewed [B, H, T, hd].
  at::Tensor q = leaf({B, T, H, D / H});
  return {
      {"RMSNorm [2048, 512]", 17, {leaf({B, T, D}), leaf({D})},
       [](const Inputs& in) { return cadre::rms_norm(in[0], in[1], 1e-5); },
       [](const Inputs& in) { return cadre::rms_norm_composite(in[0], in[1], 1e-5); }},
      // Where training keeps libtorch's ops (bfloat16 on 2.x, swiglu_fused_on_cpu) a step makes no call.
      {cadre::swiglu_fused_on_cpu(dtype) ? "SwiGLU [2048, 1536]" : "SwiGLU [2048, 1536] (unused)",
       cadre::swiglu_fused_on_cpu(dtype) ? 8 : 0,
       {leaf({B * T, F}), leaf({B * T, F})},
       [](const Inputs& in) { return cadre::swiglu_fused(in[0], in[1]); },
       [](const Inputs& in) { return cadre::swiglu_composite(in[0], in[1]); }},
      {"RoPE [8, 8, 256, 64]", 16, {q},
       [=](const Inputs& in) { return cadre::apply_rope(in[0].transpose(1, 2), cos, sin); },
       [=](const Inputs& in) { return cadre::apply_rope_composite(in[0].transpose(1, 2), cos, sin); }},
      {"causal softmax [64, 256, 256]", 8, {leaf({B * H, T, T})},
       [](const Inputs& in) { return cadre::causal_softmax(in[0], 0.125); },
       [](const Inputs& in) { return cadre::causal_softmax_composite(in[0], 0.125); }},
      {"cross-entropy [2048, 8192]", 1, {leaf({B * T, V})},
       [=](const Inputs& in) { return cadre::cross_entropy(in[0], targets); },
       [=](const Inputs& in) { return cadre::cross_entropy_composite(in[0], targets); }},
  };
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::stoi(flag(argc, argv, "--threads", "1"));
  const int repeats = std::stoi(flag(argc, argv, "--repeats", "10"));
  const std::string dtype_name = flag(argc, argv, "--dtype", "bfloat16");
  const std::string caches = flag(argc, argv, "--caches", "warm");
  if (dtype_name != "bfloat16" && dtype_name != "float32") {
    std::fprintf(stderr, "fused_kernels: --dtype must be bfloat16 or float32, not %s\n", dtype_name.c_str());
    return 2;
  }
  if (caches != "warm" && caches != "cold") {
    std::fprintf(stderr, "fused_kernels: --caches must be warm or cold, not %s\n", caches.c_str());
    return 2;
  }
  const bool cold = caches == "cold";
  const at::ScalarType dtype = dtype_name == "bfloat16" ? at::kBFloat16 : at::kFloat;
  at::set_num_threads(threads);
  cadre::cpu_block_cache::install();
  at::manual_seed(0);
  std::printf("%s, %d thread(s), forward + backward, best of %d, caches %s\n", dtype_name.c_str(), threads, repeats,
              cold ? "cold (64 MiB written before each call)" : "warm (the inputs of the call before)");
  std::printf("%-30s %9s %12s %7s %14s %16s\n", "kernel", "fused ms", "libtorch ms", "ratio", "ms saved/step",
              "faults fused/ops");
  double saved = 0;
  for (const Case& c : cases(dtype)) {
    const Timing fused = time_calls(c.fused, c.inputs, repeats, cold),
                 ops = time_calls(c.composite, c.inputs, repeats, cold);
    const double step_saving = c.calls_per_step ? (ops.best_ms - fused.best_ms) * c.calls_per_step : 0.0;
    saved += step_saving;
    std::printf("%-30s %9.3f %12.3f %6.2fx %14.1f %9ld/%-6ld\n", c.name.c_str(), fused.best_ms, ops.best_ms,
                ops.best_ms / fused.best_ms, step_saving, fused.faults, ops.faults);
  }
  std::printf("a step of the small Llama saves %.1f ms (calls per step: RMSNorm 17, SwiGLU %d, RoPE 16, softmax 8, loss 1)\n",
              saved, cadre::swiglu_fused_on_cpu(dtype) ? 8 : 0);
  return 0;
}
