// The doctor's GPU checks without a GPU: the verdicts are pure functions of the measured figures
// (floors, naming of the rank and GPU), and the measuring code runs on the CPU through the same
// functions a GPU uses.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/device.h"
#include "core/error.h"
#include "doctor/doctor.h"

namespace {

using namespace cadre::doctor;

cadre::GpuProperties h100() {
  cadre::GpuProperties g;
  g.index = 1;
  g.name = "NVIDIA H100 80GB HBM3";
  g.total_bytes = int64_t{80} << 30;
  g.free_bytes = int64_t{79} << 30;
  g.major = 9;
  return g;
}

TEST(DoctorGpu, TheMatmulFloorPassesAtItAndFailsBelowNamingTheGpuAndTheFlag) {
  DoctorOptions o;
  o.gpu_bf16_tflops_floor = 500;
  const CheckResult at_floor = judge_gpu_bf16_matmul(h100(), 500, o);
  EXPECT_TRUE(at_floor.ok);
  EXPECT_EQ(at_floor.unit, "TFLOP/s");
  EXPECT_EQ(at_floor.gpu, "GPU 1 (NVIDIA H100 80GB HBM3)");
  const CheckResult below = judge_gpu_bf16_matmul(h100(), 499.9, o);
  EXPECT_FALSE(below.ok);
  EXPECT_EQ(below.value, 499.9);
  EXPECT_EQ(below.limit, 500);
  EXPECT_NE(below.detail.find("--gpu-bf16-tflops-floor"), std::string::npos) << below.detail;
}

TEST(DoctorGpu, FreeMemoryAndVisibilityAreJudgedAndDescribed) {
  DoctorOptions o;
  o.min_free_gpu_gib = 79;
  EXPECT_TRUE(judge_gpu_memory(h100(), o).ok);
  EXPECT_DOUBLE_EQ(judge_gpu_memory(h100(), o).value, 79.0);
  o.min_free_gpu_gib = 79.5;
  EXPECT_FALSE(judge_gpu_memory(h100(), o).ok);
  const CheckResult seen = judge_gpu_visible(h100(), true);
  EXPECT_TRUE(seen.ok);
  EXPECT_NE(seen.detail.find("compute capability 9.0"), std::string::npos) << seen.detail;
  EXPECT_NE(seen.detail.find("80 GiB"), std::string::npos) << seen.detail;
  const CheckResult wrong = judge_gpu_visible(h100(), false);
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.detail.find("came back wrong"), std::string::npos) << wrong.detail;
}

TEST(DoctorGpu, AFailureNamesTheRankAndForAGpuCheckTheGpu) {
  DoctorOptions o;
  CheckResult gpu = judge_gpu_bf16_matmul(h100(), 1, o);
  gpu.rank = 3;
  EXPECT_EQ(failure_name(gpu), "gpu_bf16_matmul on rank 3, GPU 1 (NVIDIA H100 80GB HBM3)");
  CheckResult cpu("fp32_matmul");
  cpu.rank = 2;
  EXPECT_EQ(failure_name(cpu), "fp32_matmul on rank 2");
  CheckResult job("straggler");
  job.rank = -1;
  EXPECT_EQ(failure_name(job), "straggler");
}

TEST(DoctorGpu, TheMeasuringRunsOnTheCpuThroughTheSameCode) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_TRUE(matmul_exact_on(cpu));
  EXPECT_GT(bf16_matmul_tflops_on(cpu, 64), 0.0);
  try {
    cadre::gpu_properties(cpu);
    ADD_FAILURE() << "gpu_properties accepted the CPU";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
