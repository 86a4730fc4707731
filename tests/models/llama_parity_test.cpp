// Parity with PyTorch: the same weights and batch through Cadre's Llama and through an
// independent Python implementation (python/llama_ref.py, Debian's python3-torch) give the
// same logits, loss and parameter gradients, and 5 AdamW steps with clipping give the same
// parameters.
//
// Tolerance: 1e-5, relative to the largest magnitude of each compared tensor. Both sides
// compute in float32 (epsilon 1.2e-7) with different summation orders (OpenBLAS blocking vs
// libtorch's kernels in Python); over reductions of a few hundred terms the expected error is
// ~1e-6 of the magnitude, so 1e-5 leaves a 10x margin while still catching any real
// difference (a wrong rotary layout or missing scale moves results by 1e-2 or more).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include "models/llama/model.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "support/process.h"
#include "ckpt/tensor_file.h"

namespace {

constexpr double kTolerance = 1e-5;

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  double scale = want.abs().max().item<double>();
  double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

struct ParityCase {
  cadre::LlamaConfig model;
  int64_t batch = 2, seq = 16, steps = 5;
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_clip = 0.5;
};

void run_parity(const ParityCase& pc, const std::string& tag) {
  cadre::test::TempDir dir("parity-" + tag);
  at::set_num_threads(1);
  cadre::Llama model(pc.model);
  model.init_weights(42);
  at::Tensor tokens = at::randint(pc.model.vocab_size, {pc.batch, pc.seq + 1},
                                  at::make_generator<at::CPUGeneratorImpl>(7), at::kLong);
  at::Tensor x = tokens.narrow(1, 0, pc.seq), y = tokens.narrow(1, 1, pc.seq);

  cadre::TensorDict inputs{{"tokens", tokens}};
  for (const auto& p : model.named_parameters()) inputs["param." + p.key()] = p.value();
  cadre::tensor_file_save(dir / "inputs.pt", inputs);
  const auto& m = pc.model;
  nlohmann::json c = {
      {"model", {{"dim", m.dim}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads}, {"n_kv_heads", m.n_kv_heads},
                 {"vocab_size", m.vocab_size}, {"multiple_of", m.multiple_of}, {"ffn_dim", m.ffn_dim},
                 {"max_seq_len", m.max_seq_len}, {"norm_eps", m.norm_eps}, {"rope_theta", m.rope_theta},
                 {"tie_embeddings", m.tie_embeddings}}},
      {"optim", {{"lr", pc.lr}, {"beta1", pc.beta1}, {"beta2", pc.beta2}, {"eps", pc.eps},
                 {"weight_decay", pc.weight_decay}, {"grad_clip", pc.grad_clip}, {"steps", pc.steps}}}};
  cadre::test::write_text(dir / "case.json", c.dump(2));

  auto py = cadre::test::run_process({"/usr/bin/python3", CADRE_SOURCE_DIR "/tests/python/llama_parity.py", dir.path()});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  cadre::TensorDict want = cadre::tensor_file_load(dir / "outputs.pt");

  // Forward and backward.
  at::Tensor logits = model.forward(x);
  at::Tensor loss = cadre::llama_loss(logits, y);
  loss.backward();
  EXPECT_LT(relative_error(logits, want.at("logits")), kTolerance) << "logits";
  EXPECT_LT(relative_error(loss, want.at("loss")), kTolerance) << "loss " << loss.item<double>()
                                                               << " vs " << want.at("loss").item<double>();
  std::vector<at::Tensor> params;
  std::vector<bool> decay;
  for (const auto& p : model.named_parameters()) {
    ASSERT_TRUE(want.count("grad." + p.key())) << "Python has no gradient for " << p.key();
    EXPECT_LT(relative_error(p.value().grad(), want.at("grad." + p.key())), kTolerance) << "grad of " << p.key();
    params.push_back(p.value());
    decay.push_back(p.value().dim() >= 2);
  }

  // AdamW steps with global-norm clipping, from the same starting point as Python.
  cadre::AdamW opt(params, decay, {pc.beta1, pc.beta2, pc.eps, pc.weight_decay});
  at::Tensor want_norms = want.at("grad_norms");
  for (int64_t s = 0; s < pc.steps; ++s) {
    for (auto& p : params) p.mutable_grad().zero_();
    cadre::llama_loss(model.forward(x), y).backward();
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    double norm = std::sqrt(cadre::grad_sq_norm(grads));
    EXPECT_NEAR(norm, want_norms[s].item<double>(), kTolerance * norm) << "grad norm at step " << s + 1;
    cadre::grad_clip_scale(grads, norm, pc.grad_clip);
    opt.step(pc.lr);
  }
  for (const auto& p : model.named_parameters())
    EXPECT_LT(relative_error(p.value(), want.at("after." + p.key())), kTolerance) << "after AdamW: " << p.key();
}

cadre::LlamaConfig tiny_model() {
  cadre::LlamaConfig m;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;  // grouped-query attention
  m.vocab_size = 96;
  m.multiple_of = 32;
  m.max_seq_len = 32;
  return m;
}

}  // namespace

TEST(LlamaParity, MatchesPyTorchGroupedQueryUntied) { run_parity({tiny_model()}, "gqa"); }

TEST(LlamaParity, MatchesPyTorchTiedEmbeddingsFullHeads) {
  ParityCase pc{tiny_model()};
  pc.model.tie_embeddings = true;
  pc.model.n_kv_heads = 4;
  pc.model.rope_theta = 500000.0;
  run_parity(pc, "tied");
}
