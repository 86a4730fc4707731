// A LoRA run's exports, checked without Cadre's code: a run fine-tunes adapters on every
// projection of a base read from a Hugging Face folder (written by transformers); then
// - `--format peft` writes the adapter folder that peft's PeftModel.from_pretrained loads onto
//   transformers' model of the base, reproducing Cadre's logits (tests/python/lora_export_check.py);
// - `--format hf --merge` writes a plain folder (W + alpha/rank * B A) that transformers alone
//   loads, reproducing them too (tests/python/hf_export_check.py, as for any export);
// - `--format hf` without --merge, --merge or peft without adapters are refused (exit 2) saying
//   what to do; the checkpoint holds the adapters alone, so `--format pt` and `dcp` are refused,
//   and so is merging onto a base changed since the run (its fingerprint); generating from the
//   checkpoint or fine-tuning from it as a plain model (which would drop the adapters) is
//   refused too;
// - the PEFT folder comes back through lora.init_from as the run's adapters bit for bit, with
//   its rank, alpha and layers, and folders that are not a plain LoRA adapter are refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_folder.h"
#include "ckpt/manifest.h"
#include "ckpt/tensor_file.h"
#include "core/config.h"
#include "models/llama/llama_model.h"
#include "models/lora.h"
#include "models/registry.h"
#include "core/lora_naming.h"
#include "support/hf_folder_edit.h"
#include "support/process.h"
#include "support/tiny_dataset.h"
#include "support/tiny_train.h"
#include "train/lora_import.h"

namespace {

class LoraExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("lora-export");
    const std::string data = cadre::test::prepare_tiny_dataset(dir_->path(), 4, 20000);
    hf_ = *dir_ / "hf";
    auto folder = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_random_folder.py", hf_,
                                            "64", "2", "4", "2", "192", "512", "60KB"},
                                           {}, 600);
    ASSERT_EQ(folder.exit_code, 0) << folder.output;
    run_ = *dir_ / "run";
    data_ = data;
    auto r = cadre::test::run_process(
        cadre::test::tiny_train_command(data, run_, {"train.init_from=" + hf_, "model.ffn_dim=192", "lora.rank=4",
                                                     "lora.alpha=8", "lora.targets=all-linear", "optim.lr=0.02",
                                                     "optim.warmup_steps=0", "train.steps=4"}),
        {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_cadre_logits();
  }
  static void TearDownTestSuite() { delete dir_; }

  // Cadre's logits for a fixed batch: the base from the folder, the adapters from the final
  // checkpoint, which holds them alone (with their optimizer state and the base's fingerprint).
  static void write_cadre_logits() {
    const cadre::Config config = cadre::config_load(run_ + "/config.yaml", {});
    cadre::LlamaModel model(cadre::llama_config(config.model));
    cadre::lora_apply(model.llama(), config.lora, model.lora_names());
    const cadre::CheckpointReader reader(cadre::checkpoint_locate(run_));
    ASSERT_TRUE(cadre::manifest_leaves_out_base(reader.manifest()));
    const cadre::HfFolder folder(hf_);
    auto adapter = cadre::model_state_dict_adapter(config);
    c10::NoGradGuard no_grad;
    for (auto& p : model.llama().named_parameters()) {
      if (cadre::lora_is_adapter(p.key())) {
        p.value().copy_(reader.read_tensor("model." + p.key()));
        continue;
      }
      EXPECT_FALSE(reader.has("model." + p.key())) << "the checkpoint holds base tensor " << p.key();
      folder.read_float32(folder.tensors().at(adapter->external_name(p.key())), p.value().data_ptr<float>());
    }
    const at::Tensor tokens = at::randint(512, {2, 16}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
    cadre::tensor_file_save(run_ + "/cadre_logits.pt", {{"tokens", tokens}, {"logits", model.llama().forward(tokens)}});
  }

  static cadre::test::RunResult cadre_export(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {CADRE_BIN, "ckpt", "export", run_};
    argv.insert(argv.end(), args.begin(), args.end());
    return cadre::test::run_process(argv, {}, 300);
  }

  static cadre::test::TempDir* dir_;
  static std::string hf_, run_, data_;
};
cadre::test::TempDir* LoraExport::dir_ = nullptr;
std::string LoraExport::hf_, LoraExport::run_, LoraExport::data_;

TEST_F(LoraExport, PeftAdapterLoadsOntoTheTransformersBaseAndReproducesCadre) {
  const std::string out = *dir_ / "peft";
  auto r = cadre_export({"--format", "peft", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote a PEFT LoRA adapter"), std::string::npos) << r.output;
  auto check = cadre::test::run_process(
      {CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/lora_export_check.py", hf_, out, run_ + "/cadre_logits.pt",
       "4", "8"},
      {}, 600);
  ASSERT_EQ(check.exit_code, 0) << check.output;
  std::printf("[lora export] %s", check.output.substr(check.output.find("ok:")).c_str());
}

TEST_F(LoraExport, MergedFolderIsAPlainModelThatReproducesCadre) {
  const std::string out = *dir_ / "merged";
  auto r = cadre_export({"--format", "hf", "--merge", "--dtype", "float32", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_export_check.py", out,
                                         "-", run_ + "/cadre_logits.pt"},
                                        {}, 600);
  ASSERT_EQ(check.exit_code, 0) << check.output;
  std::printf("[lora merged] %s", check.output.substr(check.output.find("ok:")).c_str());
}

TEST_F(LoraExport, FormatsThatCannotHoldAdaptersAreRefused) {
  auto plain = cadre_export({"--format", "hf", "--out", *dir_ / "plain"});
  EXPECT_EQ(plain.exit_code, 2) << plain.output;
  EXPECT_NE(plain.output.find("holds LoRA adapters (lora.rank 4, 14 layers), which a Hugging Face model folder has no "
                              "place for: export them with --format peft"),
            std::string::npos)
      << plain.output;
  auto merge_peft = cadre_export({"--format", "peft", "--merge", "--out", *dir_ / "x"});
  EXPECT_EQ(merge_peft.exit_code, 2) << merge_peft.output;
  EXPECT_NE(merge_peft.output.find("--merge applies to --format hf"), std::string::npos) << merge_peft.output;
  // A checkpoint without adapters: the base's import.
  const std::string imported = *dir_ / "imported";
  auto imp = cadre::test::run_process({CADRE_BIN, "ckpt", "import", "--from", "hf", hf_, "--out", imported}, {}, 300);
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  for (const auto& [format, says] : std::vector<std::pair<std::string, std::string>>{
           {"peft", "--format peft: "}, {"hf", "--merge: "}}) {
    std::vector<std::string> argv = {CADRE_BIN, "ckpt", "export", imported, "--format", format, "--out", *dir_ / "y"};
    if (format == "hf") argv.push_back("--merge");
    auto r = cadre::test::run_process(argv, {}, 120);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("holds no LoRA adapters"), std::string::npos) << r.output;
  }
  // Reading the checkpoint as a plain model would drop its adapters: refused, saying what to do.
  auto generate = cadre::test::run_process({CADRE_BIN, "generate", "--model", run_, "--prompt", "x", "--max-tokens", "1"},
                                           {}, 120);
  EXPECT_EQ(generate.exit_code, 2) << generate.output;
  EXPECT_NE(generate.output.find("is a LoRA run's (lora.rank 4); serve the model with its adapters merged"),
            std::string::npos)
      << generate.output;
  auto init_from = cadre::test::run_process(
      cadre::test::tiny_train_command(data_, *dir_ / "from-lora", {"train.init_from=" + run_, "train.steps=1"}), {}, 120);
  EXPECT_EQ(init_from.exit_code, 2) << init_from.output;
  EXPECT_NE(init_from.output.find("is a LoRA run's (lora.rank 4): start from its merged export"), std::string::npos)
      << init_from.output;
  // pt and dcp hold a whole model, and the checkpoint holds the adapters alone.
  for (const char* format : {"pt", "dcp"}) {
    auto r = cadre_export({"--format", format, "--out", *dir_ / "z"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("holds a LoRA run's adapters without the base they were trained on: export them with "
                            "--format peft, or the model with them merged into the base with --format hf --merge"),
              std::string::npos)
        << r.output;
  }
  // Merging reads the base from where the run read it: a base changed since is refused.
  cadre::test::change_one_hf_weight(hf_);
  auto changed = cadre_export({"--format", "hf", "--merge", "--out", *dir_ / "changed"});
  EXPECT_EQ(changed.exit_code, 2) << changed.output;
  EXPECT_NE(changed.output.find("holds adapters trained on another base than the Hugging Face folder '" + hf_ + "'"),
            std::string::npos)
      << changed.output;
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "changed")) << "nothing is written";
}

TEST_F(LoraExport, PeftAdapterComesBackThroughLoraInitFrom) {
  const std::string peft = *dir_ / "peft32";
  auto r = cadre_export({"--format", "peft", "--out", peft});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  cadre::Config config = cadre::config_load(run_ + "/config.yaml", {"lora.init_from=" + peft, "lora.rank=0",
                                                                   "lora.alpha=1", "lora.targets=wq"});
  cadre::lora_init_from_config(config);
  EXPECT_EQ(config.lora.rank, 4);
  EXPECT_EQ(config.lora.alpha, 8.0);
  cadre::LlamaModel model(cadre::llama_config(config.model), /*deferred=*/true);
  EXPECT_EQ(cadre::lora_apply(model.llama(), config.lora, model.lora_names()).size(), 14u);
  auto source = cadre::lora_init_from_source(model.init_source(1), config, model);
  const cadre::CheckpointReader reader(cadre::checkpoint_locate(run_));
  int64_t factors = 0;
  for (const auto& p : model.llama().named_parameters()) {
    if (!cadre::lora_is_adapter(p.key())) continue;
    const at::Tensor want = reader.read_tensor("model." + p.key());
    at::Tensor got = at::empty(want.sizes(), at::kFloat);
    source->read(p.key(), 0, got.numel(), got.data_ptr<float>());
    EXPECT_TRUE(at::equal(got, want)) << p.key();
    ++factors;
  }
  EXPECT_EQ(factors, 28);

  // A run from it: the same adapters, rank and alpha.
  auto train = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> all = {"train.init_from=" + hf_, "model.ffn_dim=192", "train.steps=2"};
    all.insert(all.end(), sets.begin(), sets.end());
    return cadre::test::run_process(cadre::test::tiny_train_command(data_, *dir_ / "continued", all), {}, 300);
  };
  auto continued = train({"lora.init_from=" + peft});
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_NE(continued.output.find("lora: rank 4, alpha 8, dropout 0 on 14 layers"), std::string::npos)
      << continued.output;
  auto wrong_rank = train({"lora.init_from=" + peft, "lora.rank=8"});
  EXPECT_EQ(wrong_rank.exit_code, 2) << wrong_rank.output;
  EXPECT_NE(wrong_rank.output.find("lora.rank 8 is not the rank of lora.init_from"), std::string::npos)
      << wrong_rank.output;
  auto not_adapter = train({"lora.init_from=" + hf_});
  EXPECT_EQ(not_adapter.exit_code, 2) << not_adapter.output;
  EXPECT_NE(not_adapter.output.find("has no adapter_config.json"), std::string::npos) << not_adapter.output;
  const std::string dora = *dir_ / "dora";
  std::filesystem::create_directories(dora);
  std::filesystem::copy_file(peft + "/adapter_model.safetensors", dora + "/adapter_model.safetensors");
  std::ifstream in(peft + "/adapter_config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string plain = "\"use_dora\": false";
  text.replace(text.find(plain), plain.size(), "\"use_dora\": true");
  cadre::test::write_text(dora + "/adapter_config.json", text);
  auto refused = train({"lora.init_from=" + dora});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("use_dora = true is not supported"), std::string::npos) << refused.output;
}

}  // namespace
