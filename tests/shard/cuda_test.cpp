// Label `cuda`: what only a GPU can check, run by `make gpu-check` (scripts/gpu_check.sh) and kept
// out of CI by label (the Makefile excludes `cuda`), not skipped inside it. Built in every build:
// the code compiles against any libtorch; on a machine without a GPU these tests fail.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/device.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"
#include "shard/user_net.h"
#include "shard/wrap_policy.h"

namespace {

const c10::Device kGpu(c10::kCUDA, 0);

// Two training steps of the user net under FSDP units on one rank with bf16 compute, so each
// unit's full buffer is freed after its forward and regathered for its backward (the storage
// freed and re-allocated through the device's allocator). Returns the losses and the pieces'
// gradients of the last step, on the CPU.
struct Step {
  std::vector<double> losses;
  std::vector<at::Tensor> grads;
};
Step train_two_steps(const c10::Device& device) {
  auto net = std::make_shared<usernet::Net>();
  net->init(9);
  net->to(device);
  cadre::FullyShardOptions options;
  options.mixed_precision = {at::kBFloat16, at::kFloat};
  for (auto* unit : net->units()) cadre::fully_shard(*unit, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
  Step out;
  for (int step = 0; step < 2; ++step) {
    fsdp.zero_grad();
    auto [x, y] = usernet::batch(step, 0, 8);
    at::Tensor loss = at::cross_entropy_loss(cadre::call(net, x.to(device)).to(at::kFloat), y.to(device));
    loss.backward();
    out.losses.push_back(loss.item<double>());
  }
  for (const auto& p : fsdp.parameters()) out.grads.push_back(p.grad().to(at::kCPU));
  EXPECT_TRUE(fsdp.parameters().front().device() == device);
  return out;
}

}  // namespace

TEST(Cuda, DeviceSelectPicksTheLocalRanksGpu) {
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_EQ(cadre::device_select("cuda", "test"), kGpu);
  EXPECT_EQ(cadre::device_select("auto", "test"), kGpu);
  unsetenv("LOCAL_RANK");
}

TEST(Cuda, FsdpUnitsOnTheGpuMatchTheCpu) {
  const Step cpu = train_two_steps(c10::Device(c10::kCPU));
  const Step gpu = train_two_steps(kGpu);
  ASSERT_EQ(cpu.grads.size(), gpu.grads.size());
  // bf16 compute on both: different kernels round differently (bf16 has 8 bits of mantissa).
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * std::abs(cpu.losses[i]));
  for (size_t k = 0; k < cpu.grads.size(); ++k)
    EXPECT_TRUE(at::allclose(gpu.grads[k], cpu.grads[k], 5e-2, 2e-3)) << "piece " << k;
}

TEST(Cuda, HostSyncCounterCountsItemButNotKernels) {
  cadre::HostSyncCounter counter(kGpu);
  at::Tensor t = at::ones({1024}, at::TensorOptions().device(kGpu));
  at::Tensor u = (t * 2).sum();  // kernels only: no host synchronisation
  EXPECT_EQ(counter.count(), 0);
  EXPECT_EQ(u.item<float>(), 2048.0f);  // .item() waits for the GPU
  EXPECT_GE(counter.count(), 1);
}

TEST(Cuda, PeakBytesSeeAnAllocation) {
  const int64_t before = cadre::device_peak_bytes(kGpu);
  at::Tensor big = at::empty({64 << 20}, at::TensorOptions().dtype(at::kByte).device(kGpu));
  EXPECT_GE(cadre::device_peak_bytes(kGpu), std::max<int64_t>(before, 64 << 20));
}
