// GPU figures from NVML (libnvidia-ml, loaded at run time: machines without a GPU driver simply
// have none), named as the DCGM exporter names them so existing DCGM dashboards work unchanged.
// Written against NVML's documented C API; not run here (no GPU on the development machine).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace cadre::obs {

struct GpuSample {
  unsigned index = 0, minor = 0;
  std::string uuid, model;
  double util_percent = 0, mem_copy_util_percent = 0;
  double fb_used_mib = 0, fb_free_mib = 0;
  double power_w = 0, temp_c = 0, sm_clock_mhz = 0;
};

class GpuMetrics {
 public:
  GpuMetrics();  // loads NVML if present; never throws
  ~GpuMetrics();
  GpuMetrics(const GpuMetrics&) = delete;
  GpuMetrics& operator=(const GpuMetrics&) = delete;

  bool available() const { return nvml_ != nullptr; }
  std::vector<GpuSample> sample();  // empty without NVML

  struct Nvml;

 private:
  std::unique_ptr<Nvml> nvml_;
};

}  // namespace cadre::obs
