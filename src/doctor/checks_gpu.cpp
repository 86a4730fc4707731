// Doctor checks of one rank's GPU: visible and computing right, bf16 matmul throughput against
// a floor, free memory. The measuring is device-generic (it runs on the CPU too); the verdicts
// are pure functions of the measured figures.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "core/error.h"
#include "doctor/doctor.h"

namespace cadre::doctor {

std::string gpu_label(int index, const std::string& name) { return str("GPU ", index, " (", name, ")"); }

std::string failure_name(const CheckResult& c) {
  if (c.rank < 0) return c.name;
  return c.gpu.empty() ? str(c.name, " on rank ", c.rank) : str(c.name, " on rank ", c.rank, ", ", c.gpu);
}

bool matmul_exact_on(const c10::Device& device) {
  // ones(64, k) x arange(k) columns = k(k-1)/2 in every entry: exact in float32.
  const int64_t k = 256;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor product = at::mm(at::ones({64, k}, f32), at::arange(k, f32).view({k, 1}).expand({k, 8}).contiguous());
  return product.eq(float(k * (k - 1) / 2)).all().item<bool>();
}

double bf16_matmul_tflops_on(const c10::Device& device, int64_t n) {
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device);
  at::Tensor a = at::randn({n, n}, bf16), b = at::randn({n, n}, bf16);
  at::mm(a, b);  // warm-up: kernel selection, the library's workspace
  device_synchronize(device);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {  // best of 5: capability, not contention
    const auto start = std::chrono::steady_clock::now();
    at::Tensor c = at::mm(a, b);
    device_synchronize(device);
    best = std::min(best, seconds_since(start));
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e12;
}

CheckResult judge_gpu_visible(const GpuProperties& gpu, bool computes_right) {
  CheckResult r{"gpu_visible"};
  r.gpu = gpu_label(gpu.index, gpu.name);
  r.ok = computes_right;
  r.value = computes_right ? 1 : 0;
  r.detail = str(r.gpu, ", compute capability ", gpu.major, ".", gpu.minor, ", ", gpu.total_bytes / double(1 << 30),
                 " GiB");
  if (!computes_right) r.detail += ": a matmul with a known answer came back wrong";
  return r;
}

CheckResult judge_gpu_bf16_matmul(const GpuProperties& gpu, double tflops, const DoctorOptions& o) {
  CheckResult r{"gpu_bf16_matmul"};
  r.gpu = gpu_label(gpu.index, gpu.name);
  r.value = tflops;
  r.limit = o.gpu_bf16_tflops_floor;
  r.unit = "TFLOP/s";
  r.ok = tflops >= r.limit;
  r.detail = str(o.gpu_matmul_size, "^3 on ", r.gpu);
  if (!r.ok) r.detail += ": below the floor (clocks throttled, another process on the GPU, or set --gpu-bf16-tflops-floor)";
  return r;
}

CheckResult judge_gpu_memory(const GpuProperties& gpu, const DoctorOptions& o) {
  CheckResult r{"gpu_memory_free"};
  r.gpu = gpu_label(gpu.index, gpu.name);
  r.value = double(gpu.free_bytes) / (1 << 30);
  r.limit = o.min_free_gpu_gib;
  r.unit = "GiB";
  r.ok = r.value >= r.limit;
  r.detail = str("of ", gpu.total_bytes / double(1 << 30), " GiB on ", r.gpu);
  if (!r.ok) r.detail += ": other processes hold the rest (nvidia-smi names them)";
  return r;
}

std::vector<CheckResult> check_gpu(const c10::Device& device, const DoctorOptions& o) {
  const GpuProperties gpu = gpu_properties(device);  // before this process allocates: what training gets
  std::vector<CheckResult> out{judge_gpu_visible(gpu, matmul_exact_on(device)), judge_gpu_memory(gpu, o)};
  out.push_back(judge_gpu_bf16_matmul(gpu, bf16_matmul_tflops_on(device, o.gpu_matmul_size), o));
  return out;
}

}  // namespace cadre::doctor
