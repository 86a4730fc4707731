// `cadre doctor`: health checks run before training on every rank — tensor-op sanity, BLAS and
// bf16 matmul throughput, available memory, every collective's correctness, collective bandwidth
// and latency, and a straggler check — reported per rank with floors the user can set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
};

// Local checks (no communication).
CheckResult check_tensor_sanity();
CheckResult check_fp32_matmul(const DoctorOptions& o, int threads);
CheckResult check_bf16_matmul(const DoctorOptions& o, int threads);
CheckResult check_memory(const DoctorOptions& o);
std::string loaded_blas_library();  // path of the libblas mapped into this process

// Checks over the communicator; each returns this rank's view.
std::vector<CheckResult> check_collectives(comm::Communicator& comm);
CheckResult check_bandwidth(comm::Communicator& comm, const DoctorOptions& o);
CheckResult check_latency(comm::Communicator& comm, const DoctorOptions& o);
CheckResult check_straggler(comm::Communicator& comm, const DoctorOptions& o);

// Runs every check, prints the report on rank 0; returns 0 when all pass, 1 otherwise.
int run_doctor(const DoctorOptions& options);

}  // namespace cadre::doctor
