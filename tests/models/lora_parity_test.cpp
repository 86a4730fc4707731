// LoRA against PEFT: Cadre's Llama with adapters on every projection (lora.* through
// models/lora.h) and PEFT's LoRA (tests/python/lora_parity.py) on the project's PyTorch
// reference Llama give the same logits, loss and adapter gradients, and 5 clipped AdamW steps
// over the adapters the same gradient norms and adapters; the frozen base has no gradient and
// keeps its bits. Judged against float64 as llama_parity_test.cpp is (fp64_judge.h has the
// bound and why). B starts random here, not zero as in training, so that A's gradient (B^T dy
// x^T) is not zero at the first step and the test compares it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ckpt/tensor_file.h"
#include "fp64_judge.h"
#include "models/llama/llama_model.h"
#include "models/lora.h"
#include "models/lora_linear.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "support/process.h"
#include "support/tiny_llama.h"

namespace {

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 5;
constexpr double kLr = 1e-2, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8, kWeightDecay = 0.1, kClip = 0.5;

// B random (std 0.05 against A's U(+-1/8) at dim 64: the adapters move the logits by about a
// tenth of the base's), drawn from one generator in parameter order.
void randomise_b(torch::nn::Module& model) {
  c10::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  for (auto& p : model.named_parameters())
    if (p.key().size() > 7 && p.key().compare(p.key().size() - 7, 7, ".lora_b") == 0) p.value().normal_(0, 0.05, gen);
}

TEST(LoraParity, MatchesPeftOnEveryProjection) {
  cadre::test::TempDir dir("lora-parity");
  at::set_num_threads(1);
  const cadre::LlamaConfig config = cadre::test::tiny_llama_config();
  cadre::LlamaModel model(config);
  cadre::Llama& llama = model.llama();
  llama.init_weights(42);
  cadre::LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";  // PEFT's names
  const auto adapted = cadre::lora_apply(llama, lora, model.lora_names());
  ASSERT_EQ(adapted.size(), size_t(7 * config.n_layers));
  cadre::lora_init_adapters(llama, 5);
  randomise_b(llama);
  cadre::lora_freeze_base(llama);

  at::Tensor tokens = at::randint(config.vocab_size, {kBatch, kSeq + 1}, at::make_generator<at::CPUGeneratorImpl>(7),
                                  at::kLong);
  at::Tensor x = tokens.narrow(1, 0, kSeq), y = tokens.narrow(1, 1, kSeq);
  cadre::TensorDict inputs{{"tokens", tokens}}, before;
  for (const auto& p : llama.named_parameters()) {
    inputs["param." + p.key()] = p.value();
    before[p.key()] = p.value().clone();
  }
  cadre::tensor_file_save(dir / "inputs.pt", inputs);
  const auto& m = config;
  nlohmann::json c = {
      {"model", {{"dim", m.dim}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads}, {"n_kv_heads", m.n_kv_heads},
                 {"vocab_size", m.vocab_size}, {"multiple_of", m.multiple_of}, {"ffn_dim", m.ffn_dim},
                 {"max_seq_len", m.max_seq_len}, {"norm_eps", m.norm_eps}, {"rope_theta", m.rope_theta},
                 {"tie_embeddings", m.tie_embeddings}}},
      {"optim", {{"lr", kLr}, {"beta1", kBeta1}, {"beta2", kBeta2}, {"eps", kEps}, {"weight_decay", kWeightDecay},
                 {"grad_clip", kClip}, {"steps", kSteps}}},
      {"lora", {{"rank", lora.rank}, {"alpha", lora.alpha},
                {"targets", {"wq", "wk", "wv", "wo", "w1", "w2", "w3"}}}}};  // the reference's layer names
  cadre::test::write_text(dir / "case.json", c.dump(2));

  auto py = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/lora_parity.py", dir.path()});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_NE(py.output.find("ok: torch"), std::string::npos) << py.output;
  std::printf("[lora parity] %s", py.output.substr(py.output.find("ok:")).c_str());
  cadre::TensorDict want = cadre::tensor_file_load(dir / "outputs.pt");
  auto torch32 = [&](const std::string& key) { return cadre::test::torch32_runs(want, key); };
  cadre::test::Fp64Judge judge("[lora parity]");

  at::Tensor logits = llama.forward(x);
  at::Tensor loss = cadre::llama_loss(logits, y);
  loss.backward();
  judge.check("logits", "logits", logits, torch32("logits"), want.at("ref.logits"));
  judge.check("loss", "loss", loss, torch32("loss"), want.at("ref.loss"));
  std::vector<at::Tensor> params;
  for (const auto& p : llama.named_parameters()) {
    if (!cadre::lora_is_adapter(p.key())) {
      EXPECT_FALSE(p.value().grad().defined()) << p.key() << " is frozen and has a gradient";
      continue;
    }
    judge.check("adapter gradients", p.key(), p.value().grad(), torch32("grad." + p.key()),
                want.at("ref.grad." + p.key()));
    EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
    params.push_back(p.value());
  }

  cadre::AdamW opt(params, std::vector<bool>(params.size(), true), {kBeta1, kBeta2, kEps, kWeightDecay});
  const std::vector<at::Tensor> torch_norms = torch32("grad_norms");
  for (int64_t s = 0; s < kSteps; ++s) {
    for (auto& p : params) p.mutable_grad().zero_();
    cadre::llama_loss(llama.forward(x), y).backward();
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    const double norm = std::sqrt(cadre::grad_sq_norm(grads));
    std::vector<at::Tensor> theirs;
    for (const auto& r : torch_norms) theirs.push_back(r[s]);
    judge.check("gradient norms", "step " + std::to_string(s + 1), at::scalar_tensor(norm, at::kDouble), theirs,
                want.at("ref.grad_norms")[s]);
    cadre::grad_clip_scale(grads, norm, kClip);
    opt.step(kLr);
  }
  for (const auto& p : llama.named_parameters()) {
    if (cadre::lora_is_adapter(p.key())) {
      judge.check("adapters after AdamW", p.key(), p.value(), torch32("after." + p.key()),
                  want.at("ref.after." + p.key()));
    } else {
      EXPECT_TRUE(at::equal(p.value(), before.at(p.key()))) << p.key() << " is frozen and changed";
      EXPECT_TRUE(at::equal(want.at("after." + p.key()), before.at(p.key()))) << "PEFT changed " << p.key();
    }
  }
  judge.print();
}

}  // namespace
