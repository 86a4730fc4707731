// NVML through dlopen (see gpu_metrics.h). Only the few entry points DCGM's basic fields need.
#include "obs/gpu_metrics.h"

#include <dlfcn.h>

namespace cadre::obs {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(lib, name));
}

}  // namespace

struct GpuMetrics::Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int*) = nullptr;
};

GpuMetrics::GpuMetrics() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  auto n = std::make_unique<Nvml>();
  n->lib = lib;
  n->init = symbol<decltype(n->init)>(lib, "nvmlInit_v2");
  n->shutdown = symbol<decltype(n->shutdown)>(lib, "nvmlShutdown");
  n->count = symbol<decltype(n->count)>(lib, "nvmlDeviceGetCount_v2");
  n->handle = symbol<decltype(n->handle)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  n->utilization = symbol<decltype(n->utilization)>(lib, "nvmlDeviceGetUtilizationRates");
  n->memory = symbol<decltype(n->memory)>(lib, "nvmlDeviceGetMemoryInfo");
  n->power = symbol<decltype(n->power)>(lib, "nvmlDeviceGetPowerUsage");
  n->temperature = symbol<decltype(n->temperature)>(lib, "nvmlDeviceGetTemperature");
  n->clock = symbol<decltype(n->clock)>(lib, "nvmlDeviceGetClockInfo");
  n->uuid = symbol<decltype(n->uuid)>(lib, "nvmlDeviceGetUUID");
  n->name = symbol<decltype(n->name)>(lib, "nvmlDeviceGetName");
  n->minor = symbol<decltype(n->minor)>(lib, "nvmlDeviceGetMinorNumber");
  const bool complete = n->init && n->shutdown && n->count && n->handle && n->utilization && n->memory &&
                        n->power && n->temperature && n->clock && n->uuid && n->name && n->minor;
  if (!complete || n->init() != 0) {
    ::dlclose(lib);
    return;
  }
  nvml_ = std::move(n);
}

GpuMetrics::~GpuMetrics() {
  if (!nvml_) return;
  nvml_->shutdown();
  ::dlclose(nvml_->lib);
}

std::vector<GpuSample> GpuMetrics::sample() {
  std::vector<GpuSample> out;
  if (!nvml_) return out;
  unsigned int count = 0;
  if (nvml_->count(&count) != 0) return out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (nvml_->handle(i, &device) != 0) continue;
    GpuSample s;
    s.index = i;
    char text[96] = {0};
    if (nvml_->uuid(device, text, sizeof text) == 0) s.uuid = text;
    text[0] = 0;
    if (nvml_->name(device, text, sizeof text) == 0) s.model = text;
    unsigned int value = 0;
    s.minor = nvml_->minor(device, &value) == 0 ? value : i;
    nvmlUtilization_t util{};
    if (nvml_->utilization(device, &util) == 0) {
      s.util_percent = util.gpu;
      s.mem_copy_util_percent = util.memory;
    }
    nvmlMemory_t memory{};
    if (nvml_->memory(device, &memory) == 0) {
      s.fb_used_mib = double(memory.used) / (1024.0 * 1024.0);
      s.fb_free_mib = double(memory.free) / (1024.0 * 1024.0);
    }
    if (nvml_->power(device, &value) == 0) s.power_w = value / 1000.0;  // milliwatts
    if (nvml_->temperature(device, kNvmlTemperatureGpu, &value) == 0) s.temp_c = value;
    if (nvml_->clock(device, kNvmlClockSm, &value) == 0) s.sm_clock_mhz = value;
    out.push_back(s);
  }
  return out;
}

}  // namespace cadre::obs
