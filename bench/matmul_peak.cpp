// Measures this machine's matmul peak through libtorch (2048^2 at::mm, float32 and bfloat16)
// with the given thread count: the denominator of MFU. Prints JSON.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  at::set_num_threads(threads);
  const int64_t n = 2048;
  double gflops[2];
  int k = 0;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
    at::mm(a, b);  // warm-up: thread pools, oneDNN kernel generation
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      at::Tensor c = at::mm(a, b);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    gflops[k++] = 2.0 * n * n * n / best / 1e9;
  }
  std::printf("{\"threads\": %d, \"float32_gflops\": %.1f, \"bfloat16_gflops\": %.1f}\n", threads, gflops[0], gflops[1]);
  return 0;
}
