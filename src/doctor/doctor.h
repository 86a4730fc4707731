// `cadre doctor`: health checks run before training on every rank — tensor-op sanity, BLAS and
// bf16 matmul throughput, available memory, every collective's correctness, collective bandwidth
// and latency, and a straggler check — reported per rank with floors the user can set. With
// --device cuda each rank also checks its GPU: visible and computing right (name, memory,
// compute capability), bf16 matmul TFLOP/s, free memory, and an all_reduce of CUDA tensors
// through the communicator (NCCL); a failing GPU check names the rank and the GPU.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace cadre::comm {
class Communicator;
}

namespace cadre::doctor {

struct DoctorOptions {
  double fp32_gflops_floor = 10;      // reference BLAS runs ~1.5-7 GFLOP/s here, OpenBLAS 30-300
  double bf16_gflops_floor = 50;
  double min_available_gib = 1.0;
  double busbw_floor_gbps = 0.1;      // all_reduce of 16 MiB
  double latency_ceiling_us = 20000;  // all_reduce of 8 bytes
  double straggler_ratio = 1.5;       // slowest rank's time / fastest rank's time
  int64_t matmul_size = 1024;
  int64_t timeout_s = 120;
  bool json = false;
  std::string device = "cpu";           // cpu | cuda | auto: cuda adds the GPU checks
  double gpu_bf16_tflops_floor = 100;   // dense bf16 peak: H100 ~990 (783 measured), A100 312, L4 121
  double min_free_gpu_gib = 1.0;
  int64_t gpu_matmul_size = 8192;
};

// One check's outcome on one rank (rank -1: judged for the whole job).
struct CheckResult {
  explicit CheckResult(std::string check_name = "") : name(std::move(check_name)) {}
  std::string name;
  int rank = 0;
  bool ok = true;
  double value = 0;
  double limit = 0;
  std::string unit;
  std::string detail;
  std::string gpu;  // "GPU 0 (NVIDIA H100 80GB HBM3)" for a GPU check, else empty
};

// How a failed check is named in the verdict: "bf16_matmul on rank 1",
// "gpu_bf16_matmul on rank 1, GPU 0 (NVIDIA H100 80GB HBM3)", or the name alone for a job-wide one.
std::string failure_name(const CheckResult& c);

// Local checks (no communication).
CheckResult check_tensor_sanity();
CheckResult check_fp32_matmul(const DoctorOptions& o, int threads);
CheckResult check_bf16_matmul(const DoctorOptions& o, int threads);
CheckResult check_memory(const DoctorOptions& o);
std::string loaded_blas_library();  // path of the libblas mapped into this process

// GPU checks on `device` (a CUDA device; the judging functions are pure and take the measured
// figures, so they are tested anywhere).
std::string gpu_label(int index, const std::string& name);  // "GPU 0 (NVIDIA H100 80GB HBM3)"
CheckResult judge_gpu_visible(const GpuProperties& gpu, bool computes_right);
CheckResult judge_gpu_bf16_matmul(const GpuProperties& gpu, double tflops, const DoctorOptions& o);
CheckResult judge_gpu_memory(const GpuProperties& gpu, const DoctorOptions& o);
std::vector<CheckResult> check_gpu(const c10::Device& device, const DoctorOptions& o);
// A small matmul with a known answer on `device` (the CPU's check_tensor_sanity's, there).
bool matmul_exact_on(const c10::Device& device);
// bf16 matmul throughput on `device` in TFLOP/s, best of 5 after a warm-up.
double bf16_matmul_tflops_on(const c10::Device& device, int64_t n);

// Checks over the communicator; each returns this rank's view.
std::vector<CheckResult> check_collectives(comm::Communicator& comm);
CheckResult check_bandwidth(comm::Communicator& comm, const DoctorOptions& o);
CheckResult check_latency(comm::Communicator& comm, const DoctorOptions& o);
CheckResult check_straggler(comm::Communicator& comm, const DoctorOptions& o);
// An all_reduce (sum, float32 and bfloat16) of tensors on `device` against the closed-form
// answer: on a GPU, the communicator's NCCL path.
CheckResult check_all_reduce_on(comm::Communicator& comm, const c10::Device& device, const std::string& gpu);

// Runs every check, prints the report on rank 0; returns 0 when all pass, 1 otherwise.
int run_doctor(const DoctorOptions& options);

}  // namespace cadre::doctor
