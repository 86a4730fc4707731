// Label `cuda`: what only a GPU can check, run by `make gpu-check` (scripts/gpu_check.sh) and kept
// out of CI by label (the Makefile excludes `cuda`), not skipped inside it. Built in every build:
// the code compiles against any libtorch; on a machine without a GPU these tests fail.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/device.h"
#include "models/llama/decode.h"
#include "models/llama/decode_device.h"
#include "models/llama/model.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"
#include "shard/user_net.h"
#include "shard/wrap_policy.h"
#include "support/process.h"

#include <nlohmann/json.hpp>
#include <set>

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
  {  // what FSDP does not convert (buffers) computes in bf16 too, as its inputs do
    c10::NoGradGuard no_grad;
    for (auto& b : net->buffers())
      if (b.is_floating_point()) b.set_data(b.to(at::kBFloat16));
  }
  cadre::FullyShardOptions options;
  options.mixed_precision = {at::kBFloat16, at::kFloat};
  for (auto* unit : net->units()) cadre::fully_shard(*unit, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
  Step out;
  for (int step = 0; step < 2; ++step) {
    fsdp.zero_grad();
    auto [x, y] = usernet::batch(step, 0, 8);
    at::Tensor loss =
        at::cross_entropy_loss(cadre::call(net, x.to(device).to(at::kBFloat16)).to(at::kFloat), y.to(device));
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

namespace {

// Greedy tokens after `prompt`, fed in one call, then one token per call.
std::vector<int64_t> greedy(cadre::Decoder& decoder, const std::vector<int64_t>& prompt, int64_t steps) {
  std::vector<cadre::DecodeRow> rows;
  for (size_t k = 0; k < prompt.size(); ++k) rows.push_back({0, prompt[k], k + 1 == prompt.size()});
  std::vector<int64_t> out;
  for (int64_t i = 0; i < steps; ++i) {
    out.push_back(decoder.forward(rows).argmax(-1).item<int64_t>());
    rows = {{0, out.back(), true}};
  }
  return out;
}

}  // namespace

// What `cadre generate --device cuda` runs: the tensor decoder with weights and caches on the GPU,
// against the CPU's batch-invariant decoder, float32 weights.
TEST(Cuda, LlamaDecodingOnTheGpuGivesTheCpusGreedyTokens) {
  cadre::LlamaConfig c;
  c.dim = 128;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 500;
  c.multiple_of = 32;
  c.max_seq_len = 128;
  cadre::Llama model(c);
  model.init_weights(5);
  cadre::LlamaDecoder cpu(model, {1, 0, at::kFloat});
  cadre::LlamaDeviceDecoder gpu(model, {1, 0, at::kFloat, kGpu});
  const std::vector<int64_t> prompt = {1, 17, 240, 33, 499, 5, 88};
  EXPECT_EQ(greedy(gpu, prompt, 48), greedy(cpu, prompt, 48));
}

// `cadre doctor --device cuda` on one rank passes every check, the GPU's included.
TEST(Cuda, DoctorWithTheGpuPassesEveryCheck) {
  auto r = cadre::test::run_process({CADRE_BIN, "doctor", "--device", "cuda", "--json", "--matmul-size", "256",
                                     "--fp32-gflops-floor", "0", "--bf16-gflops-floor", "0"},
                                    {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  ASSERT_NE(brace, std::string::npos) << r.output;
  const auto report = nlohmann::json::parse(r.output.substr(brace, r.output.rfind('}') - brace + 1));
  std::set<std::string> names;
  for (const auto& check : report.at("checks")) names.insert(check.at("name").get<std::string>());
  for (const char* n : {"gpu_visible", "gpu_memory_free", "gpu_bf16_matmul", "device_all_reduce"})
    EXPECT_TRUE(names.count(n)) << n << " missing\n" << report.dump(2);
}

// `cadre bench collectives --device cuda` on one rank: NCCL all_reduce of buffers on the GPU,
// every element right, the device named in the header.
TEST(Cuda, BenchCollectivesOnGpuBuffersHasNoWrongElements) {
  auto r = cadre::test::run_process({CADRE_BIN, "bench", "collectives", "all_reduce", "all_gather", "-b", "1M", "-e", "1M",
                                     "-n", "5", "-w", "2", "--device", "cuda"},
                                    {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("buffers on cuda:0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << r.output;
}
