// `cadre ckpt inspect|export`: look into a run's checkpoint, or export it for other tools.
#include <cstdio>

#include <ATen/ATen.h>

#include "ckpt/hf_export.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "train/tensor_file.h"

namespace cadre {
namespace {

constexpr const char* kUsage =
    "usage: cadre ckpt inspect --run <run_dir>\n"
    "       cadre ckpt export --run <run_dir> --format hf|pt --out <path> [--tokenizer <file>]\n";

int ckpt_inspect(const Args& args) {
  std::string run;
  Flags flags("cadre ckpt inspect --run <run_dir>");
  flags.add("--run", &run, "run directory of `cadre train` (holds checkpoint.pt)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty() && !run.empty(), flags.usage());
  TensorDict state = tensor_file_load(run + "/checkpoint.pt");
  int64_t params = 0, bytes = 0;
  for (const auto& [name, t] : state) {
    std::string shape;
    for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    std::printf("%-60s %-10s %s\n", name.c_str(), c10::toString(t.scalar_type()), shape.empty() ? "scalar" : shape.c_str());
    if (name.rfind("model.", 0) == 0) params += t.numel();
    bytes += t.numel() * t.element_size();
  }
  if (state.count("meta.step")) std::printf("step %lld\n", static_cast<long long>(state.at("meta.step").item<int64_t>()));
  std::printf("%zu tensors, %lld model parameters, %.1f MB\n", state.size(), static_cast<long long>(params), bytes / 1e6);
  return 0;
}

int ckpt_export(const Args& args) {
  ExportOptions o;
  Flags flags("cadre ckpt export --run <run_dir> --format hf|pt --out <path> [--tokenizer <file>]");
  flags.add("--run", &o.run_dir, "run directory of `cadre train` (checkpoint.pt, config.yaml)");
  flags.add("--format", &o.format, "hf: Hugging Face Llama folder; pt: one torch.load-able file");
  flags.add("--out", &o.out, "output folder (hf) or file (pt)");
  flags.add("--tokenizer", &o.tokenizer, "SentencePiece model to include (default: the run's data.dir)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty() && !o.run_dir.empty(), flags.usage());
  std::printf("%s\n", checkpoint_export(o).c_str());
  return 0;
}

}  // namespace

int cmd_ckpt(const Args& args) {
  if (!args.empty() && args[0] == "inspect") return ckpt_inspect(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "export") return ckpt_export(Args(args.begin() + 1, args.end()));
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  throw ConfigError(kUsage);
}

}  // namespace cadre
