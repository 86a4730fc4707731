// Doctor checks that need no peers: a matmul with a known answer, fp32 (BLAS) and bf16 (oneDNN)
// matmul throughput against floors, and available memory.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <fstream>

#include "core/error.h"
#include "core/sysinfo.h"
#include "doctor/doctor.h"

namespace cadre::doctor {
namespace {

double matmul_gflops(int64_t n, at::ScalarType dtype, int threads) {
  at::set_num_threads(threads);
  at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  at::mm(a, b);  // warm-up: library loading, oneDNN kernel selection
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {  // best of 5: capability, not contention
    auto start = std::chrono::steady_clock::now();
    at::Tensor c = at::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

std::string loaded_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos) return path;
  }
  return "(no libblas.so mapped)";
}

CheckResult check_tensor_sanity() {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]], and a larger product whose entries are
  // sums of known integers: ones(64,k) x arange(k) column = k(k-1)/2.
  CheckResult r{"tensor_sanity"};
  at::Tensor a = at::arange(1, 5, at::kFloat).view({2, 2}), b = at::arange(5, 9, at::kFloat).view({2, 2});
  at::Tensor c = at::mm(a, b);
  at::Tensor expected = at::tensor({19.f, 22.f, 43.f, 50.f}).view({2, 2});
  const int64_t k = 256;
  at::Tensor big = at::mm(at::ones({64, k}), at::arange(k, at::kFloat).view({k, 1}).expand({k, 8}).contiguous());
  const bool small_ok = at::equal(c, expected);
  const bool big_ok = big.eq(float(k * (k - 1) / 2)).all().item<bool>();
  r.ok = small_ok && big_ok;
  r.value = r.ok ? 1 : 0;
  r.detail = r.ok ? "2x2 and 64x256x8 matmuls exact" : "matmul returned wrong values: the BLAS or CPU is broken";
  return r;
}

CheckResult check_fp32_matmul(const DoctorOptions& o, int threads) {
  CheckResult r{"fp32_matmul"};
  r.value = matmul_gflops(o.matmul_size, at::kFloat, threads);
  r.limit = o.fp32_gflops_floor;
  r.unit = "GFLOP/s";
  r.ok = r.value >= r.limit;
  r.detail = str(o.matmul_size, "^3 with ", threads, " thread(s), BLAS ", loaded_blas_library());
  if (!r.ok) r.detail += " — below the floor: reference BLAS? select OpenBLAS (update-alternatives libblas.so.3)";
  return r;
}

CheckResult check_bf16_matmul(const DoctorOptions& o, int threads) {
  CheckResult r{"bf16_matmul"};
  r.value = matmul_gflops(o.matmul_size, at::kBFloat16, threads);
  r.limit = o.bf16_gflops_floor;
  r.unit = "GFLOP/s";
  r.ok = r.value >= r.limit;
  r.detail = str(o.matmul_size, "^3 with ", threads, " thread(s)");
  return r;
}

CheckResult check_memory(const DoctorOptions& o) {
  CheckResult r{"memory_available"};
  r.value = double(machine_available_bytes()) / (1 << 30);
  r.limit = o.min_available_gib;
  r.unit = "GiB";
  r.ok = r.value >= r.limit;
  r.detail = "MemAvailable";
  return r;
}

}  // namespace cadre::doctor
