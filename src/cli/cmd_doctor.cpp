// `cadre doctor`: pre-training health checks on every rank (see src/doctor/doctor.h).
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "doctor/doctor.h"

namespace cadre {

int cmd_doctor(const Args& args) {
  doctor::DoctorOptions o;
  Flags flags(
      "cadre doctor [flags]\n"
      "Runs under `cadre run` or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
      "(and CADRE_JOB_SECRET for more than one rank); exits 1 naming each failing check and rank.");
  flags.add("--fp32-gflops-floor", &o.fp32_gflops_floor, "minimum fp32 matmul GFLOP/s (BLAS; default 10)");
  flags.add("--bf16-gflops-floor", &o.bf16_gflops_floor, "minimum bf16 matmul GFLOP/s (default 50)");
  flags.add("--min-available-gib", &o.min_available_gib, "minimum MemAvailable per host in GiB (default 1)");
  flags.add("--busbw-floor", &o.busbw_floor_gbps, "minimum all_reduce bus bandwidth at 16 MiB in GB/s (default 0.1)");
  flags.add("--latency-ceiling-us", &o.latency_ceiling_us, "maximum 8-byte all_reduce latency in us (default 20000)");
  flags.add("--straggler-ratio", &o.straggler_ratio, "maximum slowest/fastest rank time on the same work (default 1.5)");
  flags.add("--matmul-size", &o.matmul_size, "matrix size of the throughput checks (default 1024)");
  flags.add("--timeout", &o.timeout_s, "seconds before a collective fails (default 120)");
  flags.add("--json", &o.json, "print the report as JSON");
  flags.add("--device", &o.device, "cpu (default), cuda (also check the GPU LOCAL_RANK picks) or auto (cuda when usable)");
  flags.add("--gpu-bf16-tflops-floor", &o.gpu_bf16_tflops_floor, "minimum GPU bf16 matmul TFLOP/s (default 100)");
  flags.add("--min-free-gpu-gib", &o.min_free_gpu_gib, "minimum free GPU memory in GiB (default 1)");
  flags.add("--gpu-matmul-size", &o.gpu_matmul_size, "matrix size of the GPU throughput check (default 8192)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(o.gpu_matmul_size >= 1, "--gpu-matmul-size must be >= 1");
  CADRE_CONFIG_CHECK(o.gpu_bf16_tflops_floor >= 0, "--gpu-bf16-tflops-floor must be >= 0");
  CADRE_CONFIG_CHECK(o.min_free_gpu_gib >= 0, "--min-free-gpu-gib must be >= 0");
  return doctor::run_doctor(o);
}

}  // namespace cadre
