// The batch-invariant linear kernel (models/batch_invariant_linear.h) against libtorch's
// at::matmul (the BLAS GEMM the training forward uses) on the demo model's matrix shapes, by
// number of rows (streams): microseconds per call and the ratio, same threads, same run.
// Decoding one token reads every weight once, so 1 row measures memory bandwidth; 32 rows
// measure arithmetic.
//
//   linear_kernel [--threads 2] [--dtype float32|bfloat16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "models/batch_invariant_linear.h"

namespace {

template <typename F>
double best_us(F&& f, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::string dtype = "float32";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--dtype") dtype = argv[i + 1];
  }
  at::set_num_threads(threads);
  // (N, K) of the small model's matrices: q|k|v, o, gate|up, down, head.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1536, 512}, {512, 512}, {3072, 512}, {512, 1536}, {8192, 512}};
  std::printf("threads %d, weights %s, kernels %s; best of 20 calls, microseconds\n", threads, dtype.c_str(),
              cadre::batch_invariant_linear_isa());
  std::printf("%6s %6s %6s %12s %12s %8s %14s\n", "rows", "N", "K", "invariant", "at::matmul", "ratio", "invariant GB/s");
  for (int64_t M : {1, 8, 32}) {
    for (const auto& [N, K] : shapes) {
      const at::Tensor x = at::randn({M, K}), w = at::randn({N, K});
      const at::Tensor wk = dtype == "bfloat16" ? w.to(at::kBFloat16) : w;
      const at::Tensor wt = dtype == "bfloat16" ? w.to(at::kBFloat16).to(at::kFloat) : w;
      at::Tensor out = at::empty({M, N});
      const double ours = best_us([&] { cadre::batch_invariant_linear_out(x, wk, out); }, 20);
      const double blas = best_us([&] { at::matmul(x, wt.t()); }, 20);
      std::printf("%6lld %6lld %6lld %12.1f %12.1f %7.2fx %14.1f\n", static_cast<long long>(M), static_cast<long long>(N),
                  static_cast<long long>(K), ours, blas, blas / ours, double(wk.nbytes()) / ours / 1e3);
    }
  }
  return 0;
}
