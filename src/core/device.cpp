// Device choice (see device.h). The CUDA calls are compiled only with CADRE_CUDA; without it a
// request for cuda is a configuration error naming the build option.
#include "core/device.h"

#include <cstdlib>

#include <torch/csrc/api/include/torch/version.h>

#include "core/error.h"
#include "core/sysinfo.h"

#ifdef CADRE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <atomic>
#endif

namespace cadre {

DeviceAvailability DeviceAvailability::of_this_process() {
  DeviceAvailability a;
#ifdef CADRE_CUDA
  a.cuda_compiled = true;
  a.cuda_devices = static_cast<int>(c10::cuda::device_count());
#endif
  return a;
}

bool is_device_name(const std::string& name) { return name == "cpu" || name == "cuda" || name == "auto"; }

c10::Device device_resolve(const std::string& name, int local_rank, const DeviceAvailability& available,
                           const std::string& where) {
  CADRE_CONFIG_CHECK(is_device_name(name), where, ": '", name, "' is not a device (expected cpu, cuda or auto)");
  if (name == "cpu") return c10::Device(c10::kCPU);
  const bool usable = available.cuda_compiled && available.cuda_devices > 0;
  if (name == "auto" && !usable) return c10::Device(c10::kCPU);
  CADRE_CONFIG_CHECK(available.cuda_compiled, where, ": cuda was asked for, but this build of Cadre has no CUDA code "
                     "paths (configured with CADRE_CUDA=OFF; rebuild with -DCADRE_CUDA=ON against a CUDA libtorch, "
                     "docs/gpu.md), or use cpu");
  CADRE_CONFIG_CHECK(available.cuda_devices > 0, where, ": cuda was asked for, but no CUDA device is visible to this "
                     "process (CUDA_VISIBLE_DEVICES='", std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "",
                     "'; check `nvidia-smi`), or use cpu");
  CADRE_CONFIG_CHECK(local_rank >= 0, where, ": LOCAL_RANK ", local_rank, " is negative");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % available.cuda_devices));
}

int local_rank_from_env() {
  const char* v = std::getenv("LOCAL_RANK");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  CADRE_CONFIG_CHECK(end && *end == 0 && x >= 0, "environment variable LOCAL_RANK='", v, "' is not a local rank");
  return static_cast<int>(x);
}

c10::Device device_select(const std::string& name, const std::string& where) {
  const c10::Device device = device_resolve(name, local_rank_from_env(), DeviceAvailability::of_this_process(), where);
#ifdef CADRE_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  return device;
}

std::string device_describe(const c10::Device& device) {
#ifdef CADRE_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) return str(device, " (", prop.name, ")");
  }
#endif
  return str(device);
}

GpuProperties gpu_properties(const c10::Device& device) {
  CADRE_CHECK(device.is_cuda(), "gpu_properties: ", device, " is not a GPU");
#ifdef CADRE_CUDA
  GpuProperties p;
  p.index = device.index();
  cudaDeviceProp prop{};
  const cudaError_t got = cudaGetDeviceProperties(&prop, p.index);
  CADRE_CHECK(got == cudaSuccess, "GPU ", p.index, ": cudaGetDeviceProperties failed: ", cudaGetErrorString(got));
  p.name = prop.name;
  p.major = prop.major;
  p.minor = prop.minor;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(p.index);  // cudaMemGetInfo answers for the current device
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t mem = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(previous);
  CADRE_CHECK(mem == cudaSuccess, "GPU ", p.index, " (", p.name, "): cudaMemGetInfo failed: ", cudaGetErrorString(mem));
  p.total_bytes = static_cast<int64_t>(total_bytes);
  p.free_bytes = static_cast<int64_t>(free_bytes);
  return p;
#else
  CADRE_CHECK(false, "gpu_properties: this build has no CUDA code paths (CADRE_CUDA=OFF)");
  return {};
#endif
}

void device_synchronize(const c10::Device& device) {
#ifdef CADRE_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

std::string libtorch_version() {
  return str(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

std::string cuda_runtime_version() {
#ifdef CADRE_CUDA
  return str(CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10);
#else
  return "";
#endif
}

int64_t device_peak_bytes(const c10::Device& device) {
#ifdef CADRE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // StatType::AGGREGATE
  }
#endif
  return process_peak_rss_bytes();
}

#ifdef CADRE_CUDA

// Sync-debug mode reports each synchronising call as a warning on the calling thread; this
// handler counts those and passes every other warning on to the handler it replaced.
struct HostSyncCounter::Impl : c10::WarningHandler {
  c10::WarningHandler* previous = nullptr;
  c10::cuda::SyncDebugMode previous_mode = c10::cuda::SyncDebugMode::L_DISABLED;
  std::atomic<int64_t> syncs{0};
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("called a synchronizing CUDA operation") != std::string::npos) ++syncs;
    else if (previous) previous->process(warning);
  }
};

HostSyncCounter::HostSyncCounter(const c10::Device& device) {
  if (!device.is_cuda()) return;
  impl_ = new Impl;
  impl_->previous = c10::WarningUtils::get_warning_handler();
  impl_->previous_mode = c10::cuda::warning_state().get_sync_debug_mode();
  c10::WarningUtils::set_warning_handler(impl_);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
}

HostSyncCounter::~HostSyncCounter() {
  if (!impl_) return;
  c10::cuda::warning_state().set_sync_debug_mode(impl_->previous_mode);
  c10::WarningUtils::set_warning_handler(impl_->previous);
  delete impl_;
}

int64_t HostSyncCounter::count() const { return impl_ ? impl_->syncs.load() : -1; }

#else

struct HostSyncCounter::Impl {};
HostSyncCounter::HostSyncCounter(const c10::Device&) {}
HostSyncCounter::~HostSyncCounter() = default;
int64_t HostSyncCounter::count() const { return -1; }

#endif

}  // namespace cadre
