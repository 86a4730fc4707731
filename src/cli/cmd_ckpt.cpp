// `cadre ckpt inspect|verify|export|import`: look into a checkpoint, check every byte of it,
// export it for other tools, or import a Hugging Face folder as a checkpoint. The first three
// take a checkpoint, or a run or checkpoint directory (then the newest complete checkpoint in
// it; verify checks all of them).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/export.h"
#include "ckpt/hf_import.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "comm/comm.h"
#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "models/registry.h"
#include "train/adapter_checkpoint.h"

namespace cadre {
namespace {

constexpr const char* kUsage =
    "usage: cadre ckpt inspect <checkpoint|run_dir>\n"
    "       cadre ckpt verify <checkpoint|run_dir|checkpoint_dir>\n"
    "       cadre ckpt export <checkpoint|run_dir> --format hf|peft|pt|dcp --out <path> [--merge] [--tokenizer <file>]\n"
    "                         [--dtype bfloat16|float16|float32] [--max-shard-size 50GB]\n"
    "       cadre ckpt import --from hf <hf_dir> --out <checkpoint_dir>\n";

// "4x5" for the inspect listing.
std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

// The ranks of `cadre run` sharing an import or export (one process alone: no group).
struct JobRanks {
  comm::JobEnv env = comm::JobEnv::from_env();
  std::unique_ptr<comm::Communicator> group =
      env.world_size > 1 ? std::make_unique<comm::Communicator>(env) : nullptr;

  AgreeFn agree() const {
    if (!group) return nullptr;
    return [g = group.get()](bool ok) { return comm::all_ranks_agree(g, ok); };
  }
  void leave() const {
    if (group) group->barrier();  // rank 0 hosts the store: leave together
  }
};

// The one positional argument (the path); --run is accepted for older scripts.
std::string path_argument(Flags& flags, const Args& args, std::string& run) {
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.size() + (run.empty() ? 0 : 1) == 1, "expected one checkpoint or run directory\n", flags.usage());
  return run.empty() ? rest[0] : run;
}

int ckpt_inspect(const Args& args) {
  std::string run;
  Flags flags("cadre ckpt inspect <checkpoint|run_dir>");
  flags.add("--run", &run, "run directory (same as the positional argument)");
  const std::string path = checkpoint_locate(path_argument(flags, args, run));
  CheckpointReader reader(path);
  const CheckpointManifest& m = reader.manifest();
  int64_t params = 0, bytes = 0;
  for (const auto& [name, t] : m.tensors) {
    std::printf("%-60s %-8s %-14s %zu piece(s)\n", name.c_str(), t.dtype.c_str(), dims_text(t.shape).c_str(), t.pieces.size());
    if (name.rfind("model.", 0) == 0) params += t.numel();
  }
  for (const auto& f : m.files) bytes += f.bytes;
  std::printf("checkpoint %s\nstep %lld, written by %lld rank(s) with %s\n", path.c_str(), static_cast<long long>(m.step),
              static_cast<long long>(m.world_size), m.strategy.c_str());
  for (const auto& [key, value] : m.state) std::printf("%s %lld\n", key.c_str(), static_cast<long long>(value));
  std::printf("%zu tensors, %lld model parameters, %zu files, %.1f MB\n", m.tensors.size(), static_cast<long long>(params),
              m.files.size(), bytes / 1e6);
  return 0;
}

int ckpt_verify(const Args& args) {
  std::string run;
  Flags flags("cadre ckpt verify <checkpoint|run_dir|checkpoint_dir>");
  flags.add("--run", &run, "run directory (same as the positional argument)");
  const std::string path = path_argument(flags, args, run);
  // One checkpoint, or every step-* directory of a checkpoint or run directory.
  std::vector<std::string> targets;
  if (std::filesystem::is_regular_file(path + "/" + kManifestFile) || std::filesystem::exists(path + "/" + kCommittedFile)) {
    targets.push_back(path);
  } else {
    const std::string dir = checkpoint_dir_of(path);
    for (const auto& e : checkpoint_list(dir)) targets.push_back(e.path);
    CADRE_CONFIG_CHECK(!targets.empty(), "no checkpoints in '", dir, "'");
  }
  int bad = 0;
  for (const auto& target : targets) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> problems;
    int64_t bytes = 0;
    try {
      CheckpointReader reader(target);
      problems = reader.verify(&bytes);
    } catch (const CheckpointError& e) {
      problems.push_back(e.what());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (problems.empty()) {
      std::printf("ok       %s (%.1f MB checked in %.2f s, %.0f MB/s)\n", target.c_str(), bytes / 1e6, s, bytes / 1e6 / std::max(s, 1e-9));
    } else {
      ++bad;
      std::printf("DAMAGED  %s\n", target.c_str());
      for (const auto& p : problems) std::printf("         %s\n", p.c_str());
    }
  }
  if (bad) std::fprintf(stderr, "cadre ckpt verify: %d of %zu checkpoint(s) damaged\n", bad, targets.size());
  return bad ? 1 : 0;
}

int ckpt_export(const Args& args) {
  ExportOptions o;
  std::string run;
  Flags flags("cadre ckpt export <checkpoint|run_dir> --format hf|peft|pt|dcp --out <path> [--merge] [--tokenizer <file>]\n"
              "                         [--dtype bfloat16|float16|float32] [--max-shard-size 50GB]\n"
              "  hf streams the weights (64 MiB at a time) into safetensors files of at most --max-shard-size,\n"
              "  with model.safetensors.index.json when there are several; under `cadre run` each rank writes\n"
              "  its share of the files. A LoRA run (lora.rank > 0) exports its adapters with --format peft, or\n"
              "  the model with them merged into the base with --format hf --merge.");
  flags.add("--run", &run, "run directory (same as the positional argument)");
  flags.add("--format", &o.format,
            "hf: Hugging Face Llama folder; peft: a LoRA run's adapters as PEFT's adapter folder; pt: one "
            "torch.load-able file; dcp: a folder torch.distributed.checkpoint loads (torch 1.13: "
            "torch.distributed._shard.checkpoint)");
  flags.add("--out", &o.out, "output folder (hf, peft, dcp) or file (pt)");
  flags.add("--merge", &o.merge, "hf of a LoRA run: write W + alpha/rank * B A for each adapted layer");
  flags.add("--tokenizer", &o.tokenizer,
            "SentencePiece model to include (default: the tokenizer files the model came with, else the run's data.dir)");
  flags.add("--dtype", &o.dtype, "hf: dtype of the weights written (default: the dtype the model came in, else "
            "bfloat16); peft: of the adapters (default float32)");
  flags.add("--max-shard-size", &o.max_shard_size, "hf: largest safetensors file (100MB = 10^8 bytes, 100MiB = 100 x 2^20)");
  o.checkpoint = path_argument(flags, args, run);
  o.tokenizer_ids = [](const std::string& model) {
    SentencePieceTokenizer tokenizer(model);
    return std::pair<int64_t, int64_t>{tokenizer.bos_id(), tokenizer.eos_id()};
  };
  o.base_for = adapter_base_weights;
  JobRanks ranks;
  o.rank = ranks.env.rank;
  o.world_size = ranks.env.world_size;
  o.agree = ranks.agree();
  std::printf("%s\n", checkpoint_export(o, model_state_dict_adapter).c_str());
  ranks.leave();
  return 0;
}

int ckpt_import(const Args& args) {
  HfImportOptions o;
  std::string format;
  Flags flags("cadre ckpt import --from hf <hf_dir> --out <checkpoint_dir>\n"
              "  Converts a Hugging Face Llama folder (config.json, model.safetensors or sharded files with\n"
              "  model.safetensors.index.json; F32/BF16/F16) into a Cadre checkpoint <checkpoint_dir>/step-00000000\n"
              "  that any world size loads (train.init_from, generate, serve, export). Under `cadre run` each rank\n"
              "  converts a share of the tensors.");
  flags.add("--from", &format, "source format: hf");
  flags.add("--out", &o.out, "checkpoint directory to create");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(format == "hf", "--from must be hf (a Hugging Face folder), got '", format, "'\n", flags.usage());
  CADRE_CONFIG_CHECK(rest.size() == 1, "expected one Hugging Face folder\n", flags.usage());
  o.from = rest[0];
  JobRanks ranks;
  o.rank = ranks.env.rank;
  o.world_size = ranks.env.world_size;
  o.agree = ranks.agree();
  std::printf("%s\n", hf_import(o, model_hf_import_target).c_str());
  ranks.leave();
  return 0;
}

}  // namespace

int cmd_ckpt(const Args& args) {
  const Args rest = args.empty() ? Args{} : Args(args.begin() + 1, args.end());
  if (!args.empty() && args[0] == "inspect") return ckpt_inspect(rest);
  if (!args.empty() && args[0] == "verify") return ckpt_verify(rest);
  if (!args.empty() && args[0] == "export") return ckpt_export(rest);
  if (!args.empty() && args[0] == "import") return ckpt_import(rest);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  throw ConfigError(kUsage);
}

}  // namespace cadre
