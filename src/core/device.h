// Which device a process computes on: `train.device` (cpu | cuda | auto) or a `--device` flag
// resolved against what this build and machine have. Under `cadre run` LOCAL_RANK picks the GPU.
// The choice is a pure function of (name, local rank, what is available) so that every branch,
// the GPU ones included, is tested on CPU-only machines.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace cadre {

// What this process can use: whether the CUDA code paths are compiled in (CADRE_CUDA) and how
// many CUDA devices are visible.
struct DeviceAvailability {
  bool cuda_compiled = false;
  int cuda_devices = 0;
  static DeviceAvailability of_this_process();
};

bool is_device_name(const std::string& name);  // cpu | cuda | auto

// `name` as written (`where` names the key or flag in errors): cpu -> CPU; cuda -> the GPU
// local_rank % visible devices (ConfigError when CUDA is not compiled in or no GPU is visible);
// auto -> cuda when usable, else CPU.
c10::Device device_resolve(const std::string& name, int local_rank, const DeviceAvailability& available,
                           const std::string& where);

// LOCAL_RANK from the launcher's environment (0 when unset).
int local_rank_from_env();

// device_resolve against this process, then makes the chosen GPU the current device (so the
// caching allocator, NCCL and default streams use it).
c10::Device device_select(const std::string& name, const std::string& where);

// "cpu", "cuda:1 (NVIDIA H100 80GB HBM3)": for the log.
std::string device_describe(const c10::Device& device);

// A GPU as the doctor reports it: name, memory (free as the driver counts it, other processes'
// use included) and compute capability. Error naming the device for a CPU device, in a build
// without CADRE_CUDA, or when the driver does not answer.
struct GpuProperties {
  int index = 0;
  std::string name;
  int64_t total_bytes = 0, free_bytes = 0;
  int major = 0, minor = 0;
};
GpuProperties gpu_properties(const c10::Device& device);

// Waits until the work queued on `device` is done (nothing to wait for on the CPU): for timing.
void device_synchronize(const c10::Device& device);

// The libtorch this build compiled against ("2.11.0") and the CUDA runtime it links ("13.0"; ""
// without CADRE_CUDA): for summaries and the GPU check's table.
std::string libtorch_version();
std::string cuda_runtime_version();

// High-water mark of memory this process used on `device`: the CUDA caching allocator's peak of
// allocated bytes for a GPU, the peak resident set size for the CPU.
int64_t device_peak_bytes(const c10::Device& device);

// Counts host synchronisations with the GPU (cudaStreamSynchronize, a copy to pageable memory,
// .item()) made on the constructing thread while it lives, through CUDA's sync-debug mode
// (the mode torch.cuda.set_sync_debug_mode("warn") sets), whose warnings it counts instead of
// printing. On the CPU, or in a build without CADRE_CUDA, it counts nothing: count() is -1.
class HostSyncCounter {
 public:
  explicit HostSyncCounter(const c10::Device& device);
  ~HostSyncCounter();
  HostSyncCounter(const HostSyncCounter&) = delete;
  HostSyncCounter& operator=(const HostSyncCounter&) = delete;
  int64_t count() const;

  struct Impl;

 private:
  Impl* impl_ = nullptr;
};

}  // namespace cadre
