// Import of Hugging Face folders, and fine-tuning from the result:
// - export -> import -> export gives byte-identical folders (1 process and 2 ranks importing);
// - folders written by the real transformers (save_pretrained in the project venv,
//   CADRE_VENV_PYTHON: two safetensors files with an index, bfloat16 / float16, grouped-query /
//   tied head, transformers 5's rope_parameters instead of rope_theta; Llama 3.1's RoPE scaling
//   in its hub spelling) import and reproduce transformers' logits (judged against its float64
//   run, tests/models/fp64_judge.h), and `cadre generate --greedy` continues a prompt with
//   exactly the tokens transformers' greedy decoding picks; the Llama 3.1 one, exported again by
//   Cadre, loads in transformers with the same logits and greedy tokens;
// - damaged folders exit 2 naming the tensor or file, and leave no checkpoint behind;
// - train.init_from on 2 FULL_SHARD ranks starts from the imported weights (its first loss is
//   the source model's loss on that batch), each rank reading only part of the checkpoint; the
//   fine-tuned model exports with the dtype and tokenizer files the import kept (origin/);
// - a 190M-parameter folder exports streamed, in its own dtype, bit for bit, split into files,
//   within two chunk buffers of memory, and loads in transformers with Cadre's logits.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_import.h"
#include "ckpt/safetensors.h"
#include "ckpt/tensor_file.h"
#include "core/config.h"
#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "generate/model_source.h"
#include "models/llama/config.h"
#include "models/llama/model.h"
#include "models/registry.h"
#include "support/process.h"
#include "train/batch_source.h"
#include "models/fp64_judge.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The Llama module an inference model holds (generation itself sees only models/model.h).
cadre::Llama& llama_of(const cadre::InferenceModel& m) { return dynamic_cast<cadre::Llama&>(m.model->module()); }

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

cadre::test::RunResult cadre_run(const std::vector<std::string>& args, double timeout_s = 300) {
  std::vector<std::string> argv = {CADRE_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return cadre::test::run_process(argv, {}, timeout_s);
}

class HfImport : public ::testing::Test {
 protected:
  // The tiny_model fixture's dataset and trained run (40 steps, untied, grouped-query), read
  // only; everything written goes to a temporary directory.
  void SetUp() override {
    const char* fixture = std::getenv("CADRE_TINY_MODEL");
    ASSERT_TRUE(fixture) << "CADRE_TINY_MODEL is not set (ctest fixture tiny_model)";
    fixture_ = fixture;
    dir_ = std::make_unique<cadre::test::TempDir>("hf-import");
  }
  std::string data() const { return fixture_ + "/data"; }
  std::string run() const { return fixture_ + "/run"; }
  std::string path(const std::string& name) const { return *dir_ / name; }

  std::string fixture_;
  std::unique_ptr<cadre::test::TempDir> dir_;
};

TEST_F(HfImport, ExportImportExportIsByteIdentical) {
  const std::string hf = path("rt-hf");
  auto e1 = cadre_run({"ckpt", "export", run(), "--format", "hf", "--out", hf, "--dtype", "float32"});
  ASSERT_EQ(e1.exit_code, 0) << e1.output;
  for (int ranks : {1, 2}) {
    const std::string ck = path("rt-ck" + std::to_string(ranks)), again = path("rt-hf" + std::to_string(ranks));
    auto imp = ranks == 1 ? cadre_run({"ckpt", "import", "--from", "hf", hf, "--out", ck})
                          : cadre_run({"run", "--nproc-per-node", "2", "--", CADRE_BIN, "ckpt", "import", "--from", "hf", hf,
                                       "--out", ck});
    ASSERT_EQ(imp.exit_code, 0) << imp.output;
    cadre::CheckpointReader reader(cadre::checkpoint_locate(ck));
    EXPECT_EQ(reader.manifest().files.size(), static_cast<size_t>(ranks));
    EXPECT_TRUE(reader.verify().empty());
    // The import kept the folder's config and tokenizer (origin/), so the export writes float32
    // again, with the same token ids and tokenizer files.
    auto e2 = cadre_run({"ckpt", "export", ck, "--format", "hf", "--out", again});
    ASSERT_EQ(e2.exit_code, 0) << e2.output;
    EXPECT_NE(e2.output.find("in float32"), std::string::npos) << e2.output;
    EXPECT_NE(e2.output.find("/origin: generation_config.json tokenizer_config.json tokenizer.model"), std::string::npos)
        << e2.output;
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
                          "tokenizer_config.json"}) {
      ASSERT_TRUE(fs::exists(again + "/" + f)) << f;
      EXPECT_TRUE(read_bytes(hf + "/" + f) == read_bytes(again + "/" + f)) << f << " differs after import (" << ranks
                                                                          << " rank(s))";
    }
    // The imported float32 values are the trained ones, bit for bit.
    cadre::CheckpointReader trained(cadre::checkpoint_locate(run()));
    for (const auto& [name, t] : trained.manifest().tensors) {
      if (name.rfind("model.", 0) == 0) {
        EXPECT_TRUE(at::equal(reader.read_tensor(name), trained.read_tensor(name))) << name;
      }
    }
  }
}

// Cadre's export of `ck` (config.json with the RoPE scaling, float32 safetensors, .pt) loaded by
// transformers reproduces Cadre's logits for `tokens` and its greedy continuation of `prompt`
// (tests/python/hf_export_check.py).
void expect_export_loads_in_transformers(const std::string& ck, const std::string& tokenizer, const std::string& prompt,
                                         const at::Tensor& tokens, const at::Tensor& logits) {
  const std::string hf = ck + "-hf", pt = ck + ".pt";
  for (const auto& [format, out] : {std::pair<std::string, std::string>{"hf", hf}, {"pt", pt}}) {
    auto e = cadre_run({"ckpt", "export", ck, "--format", format, "--out", out});
    ASSERT_EQ(e.exit_code, 0) << e.output;
  }
  const json config = json::parse(read_bytes(hf + "/config.json"));
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3") << config.dump();
  EXPECT_EQ(config["rope_scaling"]["original_max_position_embeddings"], 64) << config.dump();
  cadre::tensor_file_save(hf + "/cadre_logits.pt", {{"tokens", tokens}, {"logits", logits}});
  auto gen = cadre_run({"generate", "--model", hf, "--tokenizer", tokenizer, "--prompt", prompt, "--greedy",
                        "--ignore-eos", "--max-tokens", "24", "--json", "--quiet", "--dtype", "float32"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  std::ofstream(hf + "/cadre_greedy.json") << json::parse(gen.output.substr(gen.output.find('{'))).dump();
  auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_export_check.py", hf, pt,
                                         hf + "/cadre_logits.pt", hf + "/cadre_greedy.json"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("ok:"), std::string::npos) << check.output;
  std::printf("bf16_llama3, exported by Cadre: %s", check.output.c_str());
}

TEST_F(HfImport, PythonWrittenShardedFoldersReproduceTheReferenceForwardAndGreedyDecoding) {
  at::set_num_threads(2);
  cadre::SentencePieceTokenizer tokenizer(data() + "/tokenizer.model");
  const std::string prompt = "The state of the Union is";
  std::vector<int> ids = {tokenizer.bos_id()};
  for (int id : tokenizer.encode(prompt)) ids.push_back(id);
  std::string id_list;
  for (int id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  for (const std::string variant : {"bf16_gqa_untied", "f16_tied", "bf16_llama3"}) {
    SCOPED_TRACE(variant);
    const std::string hf = path("py-" + variant), ck = path("py-ck-" + variant);
    auto py = cadre::test::run_process(
        {CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_sharded_folder.py", hf, variant, id_list, "24"});
    ASSERT_EQ(py.exit_code, 0) << py.output;
    std::printf("%s", py.output.substr(py.output.find("ok:")).c_str());
    // transformers 5 writes rope_parameters, not rope_theta: the import must read it. The Llama
    // 3.1 folder has the hub's spelling instead: rope_theta and rope_scaling.
    const bool llama3 = variant == "bf16_llama3";
    const json written = json::parse(read_bytes(hf + "/config.json"));
    EXPECT_EQ(written.contains("rope_theta"), llama3) << written.dump();
    EXPECT_EQ(written.contains("rope_parameters"), !llama3) << written.dump();
    EXPECT_EQ(written.contains("rope_scaling"), llama3) << written.dump();
    fs::copy_file(data() + "/tokenizer.model", hf + "/tokenizer.model");
    auto imp = cadre_run({"ckpt", "import", "--from", "hf", hf, "--out", ck});
    ASSERT_EQ(imp.exit_code, 0) << imp.output;
    EXPECT_NE(imp.output.find("from 2 safetensors file(s)"), std::string::npos) << imp.output;
    EXPECT_NE(imp.output.find(variant == "f16_tied" ? "F16 -> float32" : "BF16 -> float32"), std::string::npos);
    if (variant == "bf16_gqa_untied") {
      EXPECT_NE(imp.output.find("ignored 1 tensor(s)"), std::string::npos) << imp.output;
    }

    const cadre::TensorDict ref = cadre::tensor_file_load(hf + "/reference.pt");
    cadre::InferenceModel imported = cadre::inference_model_load(ck), direct = cadre::inference_model_load(hf);
    EXPECT_EQ(llama_of(imported).config().tie_embeddings, variant == "f16_tied");
    EXPECT_EQ(llama_of(imported).config().n_kv_heads, variant == "f16_tied" ? 4 : 2);
    EXPECT_EQ(llama_of(imported).config().rope_theta, variant == "f16_tied" ? 10000.0 : 500000.0);
    EXPECT_EQ(llama_of(imported).config().rope_scaling, llama3 ? "llama3" : "none");
    EXPECT_EQ(llama_of(imported).config().rope_original_max_seq_len, llama3 ? 64 : 8192);
    auto direct_params = llama_of(direct).named_parameters();
    for (const auto& p : llama_of(imported).named_parameters())
      EXPECT_TRUE(at::equal(p.value(), direct_params[p.key()])) << p.key();
    c10::NoGradGuard no_grad;
    const at::Tensor logits = llama_of(imported).forward(ref.at("tokens"));
    cadre::test::Fp64Judge judge("[hf import] " + variant);
    judge.check("logits", "logits", logits, cadre::test::torch32_runs(ref, "logits"), ref.at("ref.logits"));
    judge.print();
    std::printf("%s: logits max relative error to transformers' float32 %.2e\n", variant.c_str(),
                relative_error(logits, ref.at("logits")));

    // Greedy decoding through the CLI, from the checkpoint (bf16) and from the folder (f16).
    std::vector<int64_t> want(ref.at("greedy_tokens").data_ptr<int64_t>(),
                              ref.at("greedy_tokens").data_ptr<int64_t>() + ref.at("greedy_tokens").numel());
    for (const std::string& model : {variant == "f16_tied" ? hf : ck}) {
      auto gen = cadre_run({"generate", "--model", model, "--tokenizer", data() + "/tokenizer.model", "--prompt", prompt,
                            "--greedy", "--ignore-eos", "--max-tokens", "24", "--json", "--quiet", "--dtype", "float32"});
      ASSERT_EQ(gen.exit_code, 0) << gen.output;
      const json out = json::parse(gen.output.substr(gen.output.find('{')));
      EXPECT_EQ(out["prompt_tokens"].get<std::vector<int>>(), ids);
      const auto got = out["tokens"].get<std::vector<int64_t>>();
      EXPECT_EQ(got, want) << model;
      size_t matched = 0;
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) matched += got[i] == want[i];
      std::printf("%s: cadre generate --greedy from %s: %zu of %zu tokens equal to transformers'\n", variant.c_str(),
                  model == hf ? "the folder" : "the imported checkpoint", matched, want.size());
    }
    if (llama3) expect_export_loads_in_transformers(ck, data() + "/tokenizer.model", prompt, ref.at("tokens"), logits);
  }
}

// A valid single-file folder to damage, and the way to write safetensors by hand.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors, uint64_t claimed = 0) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  uint64_t n = claimed ? claimed : text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text;
  for (const auto& t : tensors) out << t.bytes;
}

std::vector<RawTensor> raw_tensors(const std::string& file) {
  std::vector<RawTensor> out;
  for (const auto& [name, t] : cadre::safetensors_read(file)) {
    at::Tensor c = t.contiguous();
    out.push_back({name, "F32", c.sizes().vec(), std::string(static_cast<const char*>(c.data_ptr()), c.nbytes())});
  }
  return out;
}

TEST_F(HfImport, DamagedFoldersExit2NamingTheTensorOrFile) {
  const std::string good = path("bad-src");
  ASSERT_EQ(cadre_run({"ckpt", "export", run(), "--format", "hf", "--out", good, "--dtype", "float32"}).exit_code, 0);
  const std::vector<RawTensor> tensors = raw_tensors(good + "/model.safetensors");
  int case_number = 0;
  // Builds a damaged copy, imports it (in this process: the CLI maps ConfigError to exit 2, as
  // the first case checks), and checks the words expected and that no checkpoint was left.
  auto check = [&](const std::string& what, const std::function<void(const std::string&)>& damage,
                   const std::vector<std::string>& expected) {
    SCOPED_TRACE(what);
    const std::string folder = path("bad-" + std::to_string(++case_number)), out = folder + "-ck";
    fs::create_directories(folder);
    fs::copy_file(good + "/config.json", folder + "/config.json");
    damage(folder);
    std::string message;
    try {
      cadre::HfImportOptions options;
      options.from = folder;
      options.out = out;
      cadre::hf_import(options, cadre::model_hf_import_target);
      ADD_FAILURE() << "imported";
    } catch (const cadre::ConfigError& e) {
      message = e.what();
    }
    std::printf("%s: %s\n", what.c_str(), message.c_str());
    for (const auto& e : expected) EXPECT_NE(message.find(e), std::string::npos) << "'" << e << "' not in: " << message;
    EXPECT_TRUE(!fs::exists(out) || cadre::checkpoint_list(out).empty()) << "a checkpoint was left in " << out;
    if (case_number == 1) {
      auto r = cadre_run({"ckpt", "import", "--from", "hf", folder, "--out", out});
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    }
  };
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  auto without = [&](const std::string& name) {
    std::vector<RawTensor> kept;
    for (const auto& t : tensors)
      if (t.name != name) kept.push_back(t);
    return kept;
  };
  check("missing tensor", [&](const std::string& f) { write_raw_safetensors(f + "/model.safetensors", without(victim)); },
        {victim, "layers.1.feed_forward.w3.weight"});
  check("wrong shape", [&](const std::string& f) {
    auto t = tensors;
    for (auto& x : t)
      if (x.name == victim) std::swap(x.shape[0], x.shape[1]);
    write_raw_safetensors(f + "/model.safetensors", t);
  }, {victim, "[64, 192]", "[192, 64]"});
  check("integer dtype", [&](const std::string& f) {
    auto t = tensors;
    for (auto& x : t)
      if (x.name == victim) {
        x.dtype = "I8";
        x.bytes.resize(x.bytes.size() / 4);
      }
    write_raw_safetensors(f + "/model.safetensors", t);
  }, {victim, "dtype I8", "model.safetensors"});
  check("unknown dtype", [&](const std::string& f) {
    auto t = tensors;
    for (auto& x : t)
      if (x.name == victim) x.dtype = "Q4_K";
    write_raw_safetensors(f + "/model.safetensors", t);
  }, {victim, "Q4_K"});
  // One parser for every safetensors file: a tensor the model does not use is checked like the
  // rest (hf_folder.cpp once skipped the size check for dtype codes it did not know).
  check("unknown dtype in a tensor the model ignores", [&](const std::string& f) {
    auto extra = tensors;
    extra.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "Q4_K", {8}, std::string(5, '\0')});
    write_raw_safetensors(f + "/model.safetensors", extra);
  }, {"rotary_emb.inv_freq", "unsupported dtype Q4_K", "model.safetensors"});
  check("truncated file", [&](const std::string& f) {
    write_raw_safetensors(f + "/model.safetensors", tensors);
    fs::resize_file(f + "/model.safetensors", fs::file_size(f + "/model.safetensors") - 1000);
  }, {"model.safetensors", "truncated"});
  check("header claims more bytes than the file has", [&](const std::string& f) {
    write_raw_safetensors(f + "/model.safetensors", tensors, uint64_t{1} << 40);
  }, {"model.safetensors", "header claims 1099511627776 bytes"});
  check("index names a missing file", [&](const std::string& f) {
    write_raw_safetensors(f + "/model-00001-of-00002.safetensors", tensors);
    json index = {{"weight_map", json::object()}};
    for (const auto& t : tensors) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
    index["weight_map"][victim] = "model-00002-of-00002.safetensors";
    cadre::test::write_text(f + "/model.safetensors.index.json", index.dump());
  }, {"model-00002-of-00002.safetensors"});
  check("dynamic rope_scaling", [&](const std::string& f) {
    write_raw_safetensors(f + "/model.safetensors", tensors);
    json c = json::parse(read_bytes(good + "/config.json"));
    c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
    cadre::test::write_text(f + "/config.json", c.dump());
  }, {"config.json", "rope_scaling.rope_type = \"dynamic\" is not supported"});
  check("no config.json", [&](const std::string& f) {
    write_raw_safetensors(f + "/model.safetensors", tensors);
    fs::remove(f + "/config.json");
  }, {"config.json"});
}

TEST_F(HfImport, FineTuningStartsFromTheImportedWeightsOnTwoShardedRanks) {
  const std::string hf = path("ft-hf"), ck = path("ft-ck"), ft = path("ft-run");
  ASSERT_EQ(cadre_run({"ckpt", "export", run(), "--format", "hf", "--out", hf, "--dtype", "float32"}).exit_code, 0);
  ASSERT_EQ(cadre_run({"ckpt", "import", "--from", "hf", hf, "--out", ck}).exit_code, 0);
  // A config without model keys: they come from the checkpoint.
  cadre::test::write_text(path("ft.yaml"), "model:\n  arch: llama\ndata:\n  batch_size: 4\noptim:\n  lr: 0.001\n"
                                           "  warmup_steps: 0\ntrain:\n  steps: 3\n  threads: 1\n  eval_interval: 0\n"
                                           "parallel:\n  strategy: FULL_SHARD\n");
  auto r = cadre_run({"run", "--nproc-per-node", "2", "--", CADRE_BIN, "train", "--config", path("ft.yaml"), "--set",
                      "data.dir=" + data(), "--set", "run.dir=" + ft, "--set", "train.init_from=" + ck});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each rank read the pieces its shards overlap, not all of them. An imported checkpoint holds
  // a tensor per piece, checked in 4 MiB blocks, and this model's tensors are smaller than one,
  // so a tensor that straddles two ranks' shards (the embedding, the head: each a unit of its
  // own, split in half) is read whole by both: a rank reads more than half (85% here), less
  // than everything (DeferredInit.NoRankEverHoldsTheWholeModel reads a larger model's import).
  const std::regex read_line(R"(init_from: rank (\d) read (\d+) of (\d+) bytes)");
  int ranks = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), read_line), end; it != end; ++it, ++ranks)
    EXPECT_LT(std::stod((*it)[2]), 0.9 * std::stod((*it)[3])) << it->str();
  EXPECT_EQ(ranks, 2) << r.output;
  // The model keys came from the checkpoint.
  const cadre::Config resolved = cadre::config_load(ft + "/config.yaml", {});
  EXPECT_EQ(cadre::llama_config(resolved.model).dim, 64);
  EXPECT_EQ(cadre::llama_config(resolved.model).n_kv_heads, 2);
  // Step 1's loss is the trained model's loss on the first global batch (8 samples).
  cadre::InferenceModel trained = cadre::inference_model_load(run());
  auto batches = cadre::BatchSource::open(data(), cadre::Split::Train, static_cast<uint64_t>(resolved.train.seed));
  cadre::Batch batch = batches->next(8, 0, 8);
  c10::NoGradGuard no_grad;
  const double want = cadre::llama_loss(llama_of(trained).forward(batch.input), batch.target).item<double>();
  std::ifstream metrics(ft + "/metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  const double got = json::parse(first)["loss"].get<double>();
  EXPECT_NEAR(got, want, 1e-5 * want) << "first fine-tuning loss " << got << ", the trained model's " << want;
  EXPECT_LT(got, 5.0);  // far below a fresh model's ln(512) = 6.24
  EXPECT_EQ(json::parse(read_bytes(ft + "/summary.json"))["initialised_from"], cadre::checkpoint_locate(ck));
  // The fine-tuned model leaves with what the imported one came with: found through
  // train.init_from, its dtype (float32) and its tokenizer files, byte for byte.
  auto e = cadre_run({"ckpt", "export", ft, "--format", "hf", "--out", path("ft-out")});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("in float32"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("tokenizer from " + cadre::checkpoint_locate(ck) + "/origin:"), std::string::npos) << e.output;
  for (const char* f : {"tokenizer.model", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(read_bytes(hf + "/" + f) == read_bytes(path("ft-out") + "/" + f)) << f;
  // A model key that changes a shape is refused before training, naming the tensor.
  auto bad = cadre_run({"train", "--config", path("ft.yaml"), "--set", "data.dir=" + data(), "--set",
                        "run.dir=" + path("ft-bad"), "--set", "train.init_from=" + ck, "--set", "model.n_kv_heads=4"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("attention.wk.weight"), std::string::npos) << bad.output;
}

}  // namespace

// A model of several hundred MB (190M parameters: 365 MiB in bfloat16, as transformers wrote
// it, 730 MiB once imported as float32) leaves as it came: exported (default dtype: the one it
// came in) by one process and by two ranks into files of at most 100 MB, every tensor the
// folder's bfloat16 bits, the tokenizer files byte for byte, the index listing each tensor once;
// the export's peak memory above its start is its two chunk buffers (64 MiB read as float32, 32
// MiB converted) and the reader's checksum blocks (16 MiB at most), whatever the tensors' sizes
// (the largest is 125 MiB as float32; measured: 114 MiB above the start); transformers
// loads it in float32 and bfloat16 and reproduces Cadre's logits (tests/python/hf_export_check.py).
TEST_F(HfImport, ALargeModelExportsStreamedInItsOwnDtypeWithinTwoChunksOfMemory) {
  const std::string hf = path("large-hf"), ck = path("large-ck");
  auto w = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_random_folder.py", hf, "1024",
                                     "8", "16", "8", "4096", "32000", "150MB"}, {}, 600);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  fs::copy_file(data() + "/tokenizer.model", hf + "/tokenizer.model");
  cadre::test::write_text(hf + "/tokenizer_config.json", "{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": false}\n");
  cadre::test::write_text(hf + "/chat_template.jinja", "{% for m in messages %}{{ m['content'] }}{% endfor %}\n");
  // Carried through byte for byte, never read (tokenizer.model comes first): any JSON does.
  cadre::test::write_text(hf + "/tokenizer.json", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n");
  cadre::test::write_text(hf + "/special_tokens_map.json", "{\"bos_token\": \"<s>\"}\n");
  auto imp = cadre_run({"ckpt", "import", "--from", "hf", hf, "--out", ck});
  ASSERT_EQ(imp.exit_code, 0) << imp.output;

  const std::string one = path("large-out1"), two = path("large-out2");
  auto e1 = cadre_run({"ckpt", "export", ck, "--format", "hf", "--out", one});
  ASSERT_EQ(e1.exit_code, 0) << e1.output;
  auto e2 = cadre_run({"run", "--nproc-per-node", "2", "--", CADRE_BIN, "ckpt", "export", ck, "--format", "hf", "--out", two,
                       "--max-shard-size", "100MB"});
  ASSERT_EQ(e2.exit_code, 0) << e2.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(e1.output, m, std::regex(R"(peak RSS (\d+) MiB \((\d+) MiB before the first tensor\))")))
      << e1.output;
  const int64_t above = std::stoll(m[1]) - std::stoll(m[2]);
  std::printf("[export] one process: %s\n", e1.output.c_str());
  EXPECT_LE(above, 64 + 32 + 16 + 16)
      << "MiB above the export's start: two chunk buffers, the reader's 16 MiB of checksum blocks and 16 MiB";
  EXPECT_NE(e1.output.find("in bfloat16, 1 file (model.safetensors)"), std::string::npos) << e1.output;

  cadre::HfFolder source(hf), split(two), whole(one);
  EXPECT_GE(split.files().size(), 4u);
  for (const auto& f : split.files()) EXPECT_LE(fs::file_size(two + "/" + f), 100'000'000u + 64 * 1024) << f;
  const json index = json::parse(read_bytes(two + "/model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), source.tensors().size());
  for (const cadre::HfFolder* out : {&split, &whole}) {
    ASSERT_EQ(out->tensors().size(), source.tensors().size());
    for (const auto& [name, t] : source.tensors()) {
      const cadre::HfTensor& got = out->tensors().at(name);
      EXPECT_EQ(got.dtype, "BF16") << name;
      ASSERT_EQ(got.shape, t.shape) << name;
      at::Tensor a = at::empty(t.shape, at::kFloat), b = at::empty(t.shape, at::kFloat);
      source.read_float32(t, a.data_ptr<float>());
      out->read_float32(got, b.data_ptr<float>());
      EXPECT_TRUE(at::equal(a, b)) << name << " differs from the folder's bfloat16 value";
    }
  }
  for (const char* f : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "chat_template.jinja", "generation_config.json"}) {
    EXPECT_TRUE(read_bytes(hf + "/" + f) == read_bytes(one + "/" + f)) << f;
    EXPECT_TRUE(read_bytes(hf + "/" + f) == read_bytes(two + "/" + f)) << f;
  }
  const json config = json::parse(read_bytes(two + "/config.json"));
  EXPECT_EQ(config["dtype"], "bfloat16");
  EXPECT_EQ(config["torch_dtype"], "bfloat16");

  // Cadre's logits from the import, for transformers to reproduce from the export.
  cadre::InferenceModel model = cadre::inference_model_load(ck, "", false);
  at::Tensor tokens = at::arange(2 * 16, at::kLong).reshape({2, 16}).mul(977).remainder(32000);
  {
    c10::NoGradGuard no_grad;
    cadre::tensor_file_save(two + "/cadre_logits.pt", {{"tokens", tokens}, {"logits", llama_of(model).forward(tokens)}});
  }
  auto check = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_export_check.py", two, "-",
                                         two + "/cadre_logits.pt"}, {}, 600);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  std::printf("[export] 2 ranks, 100MB files: %s", check.output.c_str());

  // Loaded for inference, the folder and its import (origin bfloat16) decode in bfloat16 by
  // default and loading holds the weights once in bfloat16 (plus the reader's 16 MiB chunk and
  // 32 MiB of slack), never a float32 copy (float32 on request: twice the weights).
  const double MiB = 1 << 20;
  for (const auto& [model, dtype] : std::vector<std::pair<std::string, std::string>>{{hf, ""}, {ck, ""}, {hf, "float32"}}) {
    std::vector<std::string> args = {"generate", "--model", model, "--prompt", "The", "--max-tokens", "2", "--json", "--quiet"};
    if (!dtype.empty()) args.insert(args.end(), {"--dtype", dtype});
    auto gen = cadre_run(args);
    ASSERT_EQ(gen.exit_code, 0) << gen.output;
    const json out = json::parse(gen.output.substr(gen.output.find('{')));
    const double weights = out["weight_bytes"].get<double>() / MiB;
    const double held = (out["peak_rss_after_load_bytes"].get<double>() - out["rss_before_load_bytes"].get<double>()) / MiB;
    std::printf("[load] %s --dtype %s: weights %.1f MiB, peak above the start %.1f MiB\n", model.c_str(),
                out["dtype"].get<std::string>().c_str(), weights, held);
    EXPECT_EQ(out["dtype"], dtype.empty() ? "bfloat16" : dtype) << model;
    EXPECT_NEAR(weights, (dtype.empty() ? 2.0 : 4.0) * 191382528 / MiB, 1.0) << "every weight once";
    EXPECT_LE(held, weights + 16 + 32) << model;
  }
}
