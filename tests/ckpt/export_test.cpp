// Export: a trained run exported to a Hugging Face folder and to a .pt file loads in Python
// without Cadre's code, through the real packages in the project venv (CADRE_VENV_PYTHON; torch,
// transformers and safetensors pinned in python/requirements-torch.txt): transformers'
// LlamaForCausalLM loads the folder and reproduces Cadre's logits (judged against its own
// float64 run, tests/models/fp64_judge.h's rule) and Cadre's greedy tokens; a tensor-parallel
// run's checkpoint (every matrix stored as row or column boxes of its ranks) exports the same
// way. In float32 (--dtype) and in the default bfloat16, split into files by --max-shard-size
// and written by two ranks under `cadre run`: loaded in float32 and in bfloat16. DCP exports of dp x tp runs, written by `cadre ckpt export --format dcp`, load with
// torch.distributed.checkpoint. safetensors reads Cadre's files of every dtype. Bad input is
// refused with the file named.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/export.h"
#include "ckpt/safetensors.h"
#include "core/config.h"
#include "core/error.h"
#include "models/llama/config.h"
#include "models/llama/model.h"
#include "models/registry.h"
#include "support/tiny_dataset.h"
#include "support/process.h"
#include "ckpt/tensor_file.h"

namespace {

cadre::ExportOptions options(const std::string& checkpoint, const std::string& format, const std::string& out,
                            const std::string& dtype = "") {
  cadre::ExportOptions o;
  o.checkpoint = checkpoint;
  o.format = format;
  o.out = out;
  o.dtype = dtype;
  return o;
}

std::string str_case(bool tied, int tp) { return std::string(tied ? "tied" : "untied") + "-tp" + std::to_string(tp); }

class Export : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("export");
    cadre::test::prepare_tiny_dataset(dir_->path(), 4, 20000);
  }
  static void TearDownTestSuite() { delete dir_; }

  // Trains a few steps on `nproc` FULL_SHARD ranks, `tp` of them per tensor-parallel group (so the
  // checkpoint is one shard file per rank), and writes
  // Cadre's own logits for a fixed batch beside the run. (That the shards assemble into the
  // trained model is the resume tests' business: a 1-rank run resumed from them continues the
  // 2-rank run's losses.)
  static std::string train_run(const std::string& name, bool tied, int tp, int nproc = 2) {
    std::string run = *dir_ / name;
    auto r = cadre::test::run_process({CADRE_BIN, "run", "--nproc-per-node", std::to_string(nproc), "--", CADRE_BIN, "train", "--config",
                                       CADRE_SOURCE_DIR "/configs/tiny.yaml", "--set", "data.dir=" + (*dir_ / "data"),
                                       "--set", "run.dir=" + run, "--set", "train.steps=3", "--set", "train.threads=1",
                                       "--set", "parallel.strategy=FULL_SHARD", "--set",
                                       std::string("model.tie_embeddings=") + (tied ? "true" : "false"), "--set",
                                       "parallel.tp_size=" + std::to_string(tp)});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    cadre::Config config = cadre::config_load(run + "/config.yaml", {});
    const cadre::LlamaConfig llama = cadre::llama_config(config.model);
    cadre::Llama model(llama);
    cadre::CheckpointReader reader(cadre::checkpoint_locate(run));
    {
      c10::NoGradGuard no_grad;
      for (auto& p : model.named_parameters()) p.value().copy_(reader.read_tensor("model." + p.key()));
    }
    at::Tensor tokens = at::randint(llama.vocab_size, {2, 16}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
    c10::NoGradGuard no_grad;
    cadre::tensor_file_save(run + "/cadre_logits.pt", {{"tokens", tokens}, {"logits", model.forward(tokens)}});
    // The same from the weights a bfloat16 export holds (each rounded to nearest even).
    for (auto& p : model.parameters()) p.copy_(p.to(at::kBFloat16).to(at::kFloat));
    cadre::tensor_file_save(run + "/cadre_logits_bf16.pt", {{"tokens", tokens}, {"logits", model.forward(tokens)}});
    return run;
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* Export::dir_ = nullptr;

}  // namespace

TEST_F(Export, HuggingFaceAndPtExportsReproduceCadreLogitsInPython) {
  struct Case {
    bool tied;
    int tp;
  };
  for (const Case& c : {Case{false, 1}, Case{true, 1}, Case{true, 2}}) {
    const bool tied = c.tied;
    std::string run = train_run(str_case(c.tied, c.tp), tied, c.tp);
    std::string hf = run + "/hf", pt = run + "/model.pt";
    cadre::checkpoint_export(options(run, "hf", hf, "float32"), cadre::model_state_dict_adapter);
    cadre::checkpoint_export(options(run, "pt", pt), cadre::model_state_dict_adapter);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json"})
      EXPECT_TRUE(std::filesystem::exists(hf + "/" + f)) << f;
    // Cadre's greedy continuation from the exported folder, for transformers to reproduce.
    auto gen = cadre::test::run_process({CADRE_BIN, "generate", "--model", hf, "--tokenizer",
                                         *dir_ / "data/tokenizer.model", "--prompt", "The state of the Union is",
                                         "--greedy", "--ignore-eos", "--max-tokens", "24", "--json", "--quiet"});
    ASSERT_EQ(gen.exit_code, 0) << gen.output;
    const auto greedy = nlohmann::json::parse(gen.output.substr(gen.output.find('{')));
    ASSERT_EQ(greedy["tokens"].size(), 24u) << gen.output;
    cadre::test::write_text(run + "/cadre_greedy.json", greedy.dump());
    auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_export_check.py", hf,
                                           pt, run + "/cadre_logits.pt", run + "/cadre_greedy.json"});
    EXPECT_EQ(check.exit_code, 0) << str_case(c.tied, c.tp) << ": " << check.output;
    EXPECT_NE(check.output.find("ok:"), std::string::npos) << check.output;
    std::cout << "[export] " << str_case(c.tied, c.tp) << ": " << check.output << std::flush;
  }
  // The default dtype (a model trained here has no origin: bfloat16) in files of at most 100 kB,
  // each of two ranks writing its share.
  const std::string run = *dir_ / str_case(false, 1), hf = run + "/hf-bf16";
  auto e = cadre::test::run_process({CADRE_BIN, "run", "--nproc-per-node", "2", "--", CADRE_BIN, "ckpt", "export", run,
                                     "--format", "hf", "--out", hf, "--max-shard-size", "1.5MB"});
  EXPECT_NE(e.exit_code, 0) << "transformers takes whole numbers only: " << e.output;
  EXPECT_NE(e.output.find("--max-shard-size '1.5MB'"), std::string::npos) << e.output;
  e = cadre::test::run_process({CADRE_BIN, "run", "--nproc-per-node", "2", "--", CADRE_BIN, "ckpt", "export", run,
                                "--format", "hf", "--out", hf, "--max-shard-size", "100kB"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("in bfloat16, 4 files with model.safetensors.index.json"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("rank 1 wrote"), std::string::npos) << e.output;
  auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_export_check.py", hf,
                                         run + "/model.pt", run + "/cadre_logits_bf16.pt"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("weights bfloat16 in 4 file(s)"), std::string::npos) << check.output;
  std::cout << "[export] bfloat16, 4 files: " << check.output << std::flush;
}

// Runs of dp x tp layouts exported as PyTorch distributed checkpoints through the CLI (`cadre
// ckpt export --format dcp`): their stored boxes become DCP chunks, and PyTorch 2.x's
// torch.distributed.checkpoint (the project venv's) loads them into a state dict equal to the
// .pt export, as does its dcp_to_torch_save.
TEST_F(Export, DcpExportsOfDpTimesTpRunsLoadWithTorchDistributedCheckpoint) {
  struct Layout {
    int nproc, tp;
  };
  for (const Layout& l : {Layout{2, 1}, Layout{2, 2}, Layout{4, 2}}) {
    const std::string tag = "dcp-dp" + std::to_string(l.nproc / l.tp) + "xtp" + std::to_string(l.tp);
    SCOPED_TRACE(tag);
    const std::string run = train_run(tag, false, l.tp, l.nproc);
    const std::string dcp = run + "/dcp", pt = run + "/model.pt";
    auto e = cadre::test::run_process({CADRE_BIN, "ckpt", "export", run, "--format", "dcp", "--out", dcp});
    ASSERT_EQ(e.exit_code, 0) << e.output;
    ASSERT_EQ(cadre::test::run_process({CADRE_BIN, "ckpt", "export", run, "--format", "pt", "--out", pt}).exit_code, 0);
    EXPECT_NE(e.output.find("chunks"), std::string::npos) << e.output;
    for (const char* f : {".metadata", "__0_0.distcp"}) EXPECT_TRUE(std::filesystem::exists(dcp + "/" + f)) << f;
    auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/dcp_load_check.py", dcp, pt});
    EXPECT_EQ(check.exit_code, 0) << check.output;
    EXPECT_NE(check.output.find("ok:"), std::string::npos) << check.output;
    if (l.tp > 1) {
      // Tensor parallelism stores matrices as boxes of its ranks: some tensors come in several chunks.
      EXPECT_EQ(check.output.find("(0 tensors split)"), std::string::npos) << check.output;
    }
    std::cout << "[export] " << tag << ": " << check.output.substr(check.output.find("ok:")) << std::flush;
  }
}

TEST(Safetensors, RoundTripsEveryDtype) {
  cadre::test::TempDir dir("safetensors");
  std::map<std::string, at::Tensor> in = {{"a", at::randn({3, 5})},
                                          {"b", at::randn({7}).to(at::kBFloat16)},
                                          {"c", at::arange(10, at::kLong).view({2, 5})},
                                          {"empty", at::empty({0, 4})}};
  cadre::safetensors_write(dir / "t.safetensors", in);
  auto out = cadre::safetensors_read(dir / "t.safetensors");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) EXPECT_TRUE(at::equal(out.at(name), t)) << name;
}

// The real safetensors package reads what Cadre writes: every dtype Cadre writes, an empty tensor,
// shapes of rank 1 to 3, and the metadata; values bit for bit against a .pt copy.
TEST(Safetensors, ThePythonPackageReadsEveryDtypeCadreWrites) {
  cadre::test::TempDir dir("safetensors-py");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  std::map<std::string, at::Tensor> in = {{"f32", at::randn({3, 5}, gen)},
                                          {"bf16", at::randn({7}, gen).to(at::kBFloat16)},
                                          {"f16", at::randn({2, 3, 4}, gen).to(at::kHalf)},
                                          {"i64", at::arange(-5, 5, at::kLong).view({2, 5})},
                                          {"i32", at::arange(6, at::kInt)},
                                          {"model.layers.0.self_attn.q_proj.weight", at::randn({8, 8}, gen)},
                                          {"empty", at::empty({0, 4})}};
  cadre::safetensors_write(dir / "t.safetensors", in, {{"format", "pt"}, {"written_by", "cadre"}});
  cadre::tensor_file_save(dir / "expected.pt", in);
  auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/safetensors_check.py",
                                         dir / "t.safetensors", dir / "expected.pt", "format=pt", "written_by=cadre"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("ok: safetensors"), std::string::npos) << check.output;
  std::cout << "[safetensors] " << check.output << std::flush;
}

TEST(ExportErrors, MissingCheckpointAndBadFormatAreConfigErrors) {
  cadre::test::TempDir dir("export-bad");
  auto message = [](const cadre::ExportOptions& o) {
    try {
      cadre::checkpoint_export(o, cadre::model_state_dict_adapter);
    } catch (const cadre::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(options(dir.path(), "hf", dir / "out")).find("no complete checkpoint in"), std::string::npos);
  EXPECT_NE(message(options(dir.path(), "onnx", dir / "out")).find("--format"), std::string::npos);
}
