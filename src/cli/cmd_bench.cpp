// `cadre bench <what>`: benchmark command group. `collectives` takes the nccl-tests flags
// (-b -e -f -n -w -c -d -o) and the collectives to time as positional arguments; `gemm` a
// model's linear layer shapes; `images` an image dataset.
#include <chrono>
#include <cstdio>

#include "bench/collectives_bench.h"
#include "bench/gemm_bench.h"
#include "data/encoded_image_loader.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"

namespace cadre {
namespace {

int bench_collectives(const Args& args) {
  bench::CollectivesBenchOptions o;
  std::string min_bytes = "32M", max_bytes = "32M";
  int64_t check = 1;
  std::string dtype = "float", redop = "sum";
  Flags flags(
      "cadre bench collectives [all_reduce|all_gather|reduce_scatter|broadcast|c10d_all_reduce|c10d_all_gather|\n"
      "                         c10d_reduce_scatter|all]... [flags]\n"
      "c10d_*: libtorch's own ProcessGroupGloo ops in the same job, float sum/max (all_gather and\n"
      "reduce_scatter over flat tensors need libtorch 2.3 or later).\n"
      "Runs under `cadre run` or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
      "(and CADRE_JOB_SECRET for more than one rank).");
  flags.add("-b", &min_bytes, "minimum size in bytes (K, M, G suffixes; default 32M)");
  flags.add("-e", &max_bytes, "maximum size in bytes (default 32M)");
  flags.add("-f", &o.step_factor, "multiplication factor between sizes (default 2)");
  flags.add("-n", &o.iters, "timed iterations per size (default 20)");
  flags.add("-w", &o.warmup, "warm-up iterations per size (default 5)");
  flags.add("-c", &check, "check results: 1 or 0 (default 1)");
  flags.add("-d", &dtype, "float, bfloat16, half, int64 or all (default float)");
  flags.add("-o", &redop, "reduction: sum, avg, max or all (default sum)");
  flags.add("--timeout", &o.timeout_s, "seconds before an op fails (default 120)");
  int64_t validate = 0, blocking = 0;
  flags.add("--validate", &validate, "1: time ops with the cross-rank check on, as training runs them (default 0)");
  flags.add("--blocking", &blocking, "1: wait for each timed op before issuing the next (default 0)");
  flags.add("--device", &o.device, "where the buffers live: cpu (default), cuda (NCCL; the GPU LOCAL_RANK picks) or auto");
  auto positional = flags.parse(args);
  CADRE_CONFIG_CHECK(validate == 0 || validate == 1, "--validate takes 0 or 1, got ", validate);
  CADRE_CONFIG_CHECK(blocking == 0 || blocking == 1, "--blocking takes 0 or 1, got ", blocking);
  o.validate = validate == 1;
  o.blocking = blocking == 1;
  o.min_bytes = bench::parse_byte_size(min_bytes, "-b");
  o.max_bytes = bench::parse_byte_size(max_bytes, "-e");
  CADRE_CONFIG_CHECK(check == 0 || check == 1, "-c takes 0 or 1, got ", check);
  o.check = check == 1;
  o.dtypes = {dtype};
  o.redops = {redop};
  if (!positional.empty()) o.collectives = positional;
  return bench::run_collectives_bench(o);
}

// The training GEMMs of a model's linear layers through Cadre's kernels (bench/gemm_bench.h).
int bench_gemm(const Args& args) {
  bench::GemmBenchOptions o;
  std::string linears;
  Flags flags("cadre bench gemm --linears in:out[xcount],... [--tokens 2048] [--dtype float32|bfloat16] [--threads 2]");
  flags.add("--linears", &linears, "the model's linear layers: in:out, or in:outxcount for a shape used count times");
  flags.add("--tokens", &o.tokens, "rows of each GEMM: a micro-batch's batch x sequence (default 2048)");
  flags.add("--dtype", &o.dtype, "float32 (default) or bfloat16");
  flags.add("--threads", &o.threads, "intra-op threads (default 2)");
  flags.add("--repeats", &o.repeats, "timed runs of each GEMM, the median counts (default 10)");
  flags.add("--warmup", &o.warmup, "untimed runs first (default 2)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!linears.empty(), "--linears is required\n", flags.usage());
  o.linears = bench::parse_linear_shapes(linears);
  return bench::run_gemm_bench(o);
}

}  // namespace

// Images/s of the encoded-image loader alone: train transform (RandomResizedCrop, flip,
// normalise) at --size, --workers decode threads, one JSON line (bench/image_pipeline.py reads it).
int bench_images(const Args& args) {
  std::string data;
  int64_t workers = 1, size = 224, batch = 64, batches = 20;
  Flags flags("cadre bench images --data <dir> [--workers N] [--size 224] [--batch 64] [--batches 20]");
  flags.add("--data", &data, "a dataset `cadre data prepare --images` wrote from an ImageFolder");
  flags.add("--workers", &workers, "decode threads (default 1)");
  flags.add("--size", &size, "output side (default 224)");
  flags.add("--batch", &batch, "images per batch (default 64)");
  flags.add("--batches", &batches, "batches timed after one warm-up batch (default 20)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!data.empty(), "--data is required");
  CADRE_CONFIG_CHECK(workers >= 1 && size >= 1 && batch >= 1 && batches >= 1, "--workers, --size, --batch and --batches must be positive");
  EncodedLoaderOptions o;
  o.workers = static_cast<int>(workers);
  o.transform.size = static_cast<int>(size);
  EncodedImageLoader loader(data, Split::Train, 1234, o);
  const uint64_t B = static_cast<uint64_t>(batch);
  loader.next(B, 0, B);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < batches; ++i) loader.next(B, 0, B);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = double(B) * double(batches) / seconds;
  std::printf("{\"images_per_s\": %.1f, \"workers\": %lld, \"size\": %lld, \"images\": %lld, \"seconds\": %.3f}\n", rate,
              static_cast<long long>(workers), static_cast<long long>(size), static_cast<long long>(batch * batches), seconds);
  return 0;
}

int cmd_bench(const Args& args) {
  const char* usage =
      "usage: cadre bench <what> [args...]\n\n"
      "  collectives   all_reduce / all_gather / reduce_scatter / broadcast timings (nccl-tests layout)\n"
      "  gemm          GFLOP/s of a model's linear layers (forward, input and weight gradients) through Cadre's kernels\n"
      "  images        images/s of the JPEG/PNG loader (decode + RandomResizedCrop + flip + normalise)\n";
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    if (args.empty()) throw ConfigError("cadre bench needs a benchmark name");
    return 0;
  }
  Args rest(args.begin() + 1, args.end());
  if (args[0] == "collectives") return bench_collectives(rest);
  if (args[0] == "images") return bench_images(rest);
  if (args[0] == "gemm") return bench_gemm(rest);
  throw ConfigError(str("unknown benchmark '", args[0], "'\n", usage));
}

}  // namespace cadre
