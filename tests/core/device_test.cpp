// train.device / --device: the choice between CPU and a GPU as a pure function of what is
// available, so that every branch (the GPU ones too) runs on CPU-only machines, and the
// config key's own check.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/config.h"
#include "core/device.h"
#include "core/error.h"

using cadre::ConfigError;
using cadre::DeviceAvailability;
using cadre::device_resolve;

namespace {
std::string resolve_error(const std::string& name, int local_rank, DeviceAvailability a) {
  try {
    device_resolve(name, local_rank, a, "train.device");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
const DeviceAvailability kNoCuda{false, 0};
const DeviceAvailability kCudaNoGpu{true, 0};
const DeviceAvailability kFourGpus{true, 4};
}  // namespace

TEST(Device, CpuIsAlwaysTheCpu) {
  EXPECT_EQ(device_resolve("cpu", 3, kFourGpus, "x"), c10::Device(c10::kCPU));
  EXPECT_EQ(device_resolve("cpu", 0, kNoCuda, "x"), c10::Device(c10::kCPU));
}

TEST(Device, CudaPicksTheLocalRanksGpu) {
  EXPECT_EQ(device_resolve("cuda", 0, kFourGpus, "x"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(device_resolve("cuda", 3, kFourGpus, "x"), c10::Device(c10::kCUDA, 3));
  // More local ranks than visible GPUs share them round robin (one GPU per rank is the norm).
  EXPECT_EQ(device_resolve("cuda", 5, kFourGpus, "x"), c10::Device(c10::kCUDA, 1));
}

TEST(Device, AutoIsCudaOnlyWhenUsable) {
  EXPECT_EQ(device_resolve("auto", 2, kFourGpus, "x"), c10::Device(c10::kCUDA, 2));
  EXPECT_EQ(device_resolve("auto", 2, kCudaNoGpu, "x"), c10::Device(c10::kCPU));
  EXPECT_EQ(device_resolve("auto", 2, kNoCuda, "x"), c10::Device(c10::kCPU));
}

TEST(Device, CudaWithoutItIsAConfigErrorSayingWhy) {
  const std::string off = resolve_error("cuda", 0, kNoCuda);
  EXPECT_NE(off.find("train.device"), std::string::npos) << off;
  EXPECT_NE(off.find("CADRE_CUDA=OFF"), std::string::npos) << off;
  const std::string none = resolve_error("cuda", 0, kCudaNoGpu);
  EXPECT_NE(none.find("train.device"), std::string::npos) << none;
  EXPECT_NE(none.find("no CUDA device is visible"), std::string::npos) << none;
  const std::string bad = resolve_error("gpu", 0, kFourGpus);
  EXPECT_NE(bad.find("'gpu' is not a device"), std::string::npos) << bad;
}

TEST(Device, LocalRankComesFromTheEnvironment) {
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(cadre::local_rank_from_env(), 0);
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(cadre::local_rank_from_env(), 3);
  setenv("LOCAL_RANK", "three", 1);
  EXPECT_THROW(cadre::local_rank_from_env(), ConfigError);
  unsetenv("LOCAL_RANK");
}

// This process: the CPU is always there; cuda is refused exactly when this build or machine
// lacks it (the message then says which).
TEST(Device, SelectAgreesWithThisProcess) {
  EXPECT_EQ(cadre::device_select("cpu", "train.device"), c10::Device(c10::kCPU));
  const DeviceAvailability here = DeviceAvailability::of_this_process();
  if (here.cuda_compiled && here.cuda_devices > 0) {
    EXPECT_TRUE(cadre::device_select("auto", "train.device").is_cuda());
  } else {
    EXPECT_EQ(cadre::device_select("auto", "train.device"), c10::Device(c10::kCPU));
    EXPECT_THROW(cadre::device_select("cuda", "train.device"), ConfigError);
  }
}

TEST(Device, ConfigKeyTakesOnlyTheThreeNames) {
  EXPECT_EQ(cadre::config_parse("", "t.yaml", {}).train.device, "cpu");
  EXPECT_EQ(cadre::config_parse("train:\n  device: auto\n", "t.yaml", {}).train.device, "auto");
  EXPECT_EQ(cadre::config_parse("", "t.yaml", {"train.device=cuda"}).train.device, "cuda");
  try {
    cadre::config_parse("train:\n  device: gpu0\n", "t.yaml", {});
    FAIL() << "train.device: gpu0 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.device: 'gpu0' is not cpu, cuda or auto"), std::string::npos) << e.what();
  }
}
