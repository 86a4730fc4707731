// Parity with torch.optim.SGD (PyPI's torch in the project venv): the same parameters and
// gradients through Cadre's SGD and PyTorch's for 6 steps with a changing learning rate give the
// same parameters and momentum buffers, for Nesterov momentum with weight decay, plain momentum
// with dampening, and no momentum. Matrices and kernels decay; the 1-d parameters (a bias, a
// norm scale) do not, as optim.no_decay: norm_and_bias, which on the PyTorch side is a second
// param group with weight_decay 0. One parameter is a transposed view, so the op-by-op path is
// checked beside the fused loop.
//
// Judged against float64 (models/fp64_judge.h says why): Cadre's float32 error must be at most
// 4x PyTorch's largest over 4 float32 runs (from the given values and from values moved by one
// ulp), floored at 4 float32 unit roundoffs of the tensor's magnitude. An SGD step is 3 to 5
// roundings per element, each at most one unit roundoff: both sides' errors after 6 steps are a
// few tens of unit roundoffs of the magnitude, and in what order a side rounds (FMA or not, the
// compiler's choice) moves it within that. A wrong term (lr 0.1% off, dampening on the first
// step, Nesterov's extra term, decay on a 1-d parameter) moves results by 1e-4 of the magnitude
// or more, 100x past the bound.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/tensor_file.h"
#include "models/fp64_judge.h"
#include "optim/sgd.h"
#include "support/process.h"

namespace {

struct Case {
  std::string tag;
  cadre::SgdOptions options;
};

// Cadre's side of one case in `dir`: writes the inputs for the Python side, then steps.
struct CadreRun {
  std::vector<at::Tensor> params;
  cadre::TensorDict inputs;
  std::unique_ptr<cadre::Sgd> sgd;
};

CadreRun run_cadre(const std::string& dir, const cadre::SgdOptions& options) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  const std::vector<std::vector<int64_t>> shapes = {{8, 5}, {5}, {3, 2, 3, 3}, {7}, {4, 6}};
  const std::vector<bool> decay = {true, false, true, false, true};
  const std::vector<double> lrs = {0.02, 0.05, 0.1, 0.1, 0.07, 0.03};  // warmup, then decay
  const size_t transposed = 4;  // held as the transpose of a [6, 4] tensor: not contiguous
  CadreRun r;
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor init = at::randn(shapes[i], gen);
    r.inputs["param" + std::to_string(i)] = init;
    r.params.push_back(i == transposed ? init.t().contiguous().t() : init.clone());
  }
  EXPECT_FALSE(r.params[transposed].is_contiguous());
  std::vector<std::vector<at::Tensor>> grads(lrs.size());
  for (size_t s = 0; s < lrs.size(); ++s)
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads[s].push_back(at::randn(shapes[i], gen));
      r.inputs["grad" + std::to_string(s) + "." + std::to_string(i)] = grads[s][i];
    }
  cadre::tensor_file_save(dir + "/inputs.pt", r.inputs);
  nlohmann::json c = {{"momentum", options.momentum}, {"dampening", options.dampening},
                      {"nesterov", options.nesterov}, {"weight_decay", options.weight_decay},
                      {"lrs", lrs}, {"decay", decay}};
  cadre::test::write_text(dir + "/case.json", c.dump(2));

  r.sgd = std::make_unique<cadre::Sgd>(r.params, decay, options);
  for (size_t s = 0; s < lrs.size(); ++s) {
    for (size_t i = 0; i < r.params.size(); ++i) r.params[i].mutable_grad() = grads[s][i].clone();
    r.sgd->step(lrs[s]);
  }
  return r;
}

void check_case(const std::string& dir, const Case& c, CadreRun& r) {
  cadre::TensorDict want = cadre::tensor_file_load(dir + "/outputs.pt");
  cadre::test::Fp64Judge judge("[sgd parity] " + c.tag);
  for (size_t i = 0; i < r.params.size(); ++i) {
    const std::string p = "p" + std::to_string(i), buf = "buf" + std::to_string(i);
    judge.check("params", p, r.params[i], cadre::test::torch32_runs(want, p), want.at("ref." + p));
    if (c.options.momentum != 0)
      judge.check("buffers", buf, r.sgd->momentum_buffer()[i], cadre::test::torch32_runs(want, buf),
                  want.at("ref." + buf));
    // The parameters moved: a step that did nothing would pass nothing above by accident.
    EXPECT_FALSE(at::equal(r.params[i], r.inputs.at("param" + std::to_string(i)))) << c.tag << " " << p;
  }
  EXPECT_EQ(want.count("buf0"), c.options.momentum != 0 ? 1u : 0u) << c.tag;
  judge.print();
}

TEST(SgdParity, NesterovDampenedAndPlainSgdMatchTorchOptimSgd) {
  at::set_num_threads(1);
  const std::vector<Case> cases = {
      {"nesterov", {/*momentum=*/0.9, /*dampening=*/0, /*weight_decay=*/1e-2, /*nesterov=*/true}},
      {"dampening", {0.8, 0.3, 5e-3, false}},
      {"plain", {0, 0, 1e-2, false}},
  };
  cadre::test::TempDir dir("sgd-parity");
  std::vector<CadreRun> runs;
  std::vector<std::string> argv = {CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/sgd_parity.py"};
  for (const Case& c : cases) {
    std::filesystem::create_directories(dir / c.tag);
    runs.push_back(run_cadre(dir / c.tag, c.options));
    argv.push_back(dir / c.tag);
  }
  auto py = cadre::test::run_process(argv);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_NE(py.output.find("ok: torch.optim.SGD"), std::string::npos) << py.output;
  for (size_t k = 0; k < cases.size(); ++k) check_case(dir / cases[k].tag, cases[k], runs[k]);
}

}  // namespace
