// Collective benchmark in the nccl-tests layout: for each collective, dtype and reduction, a
// row per size with out-of-place and in-place time, algorithm and bus bandwidth and the count
// of wrong elements, then the "# Avg bus bandwidth" footer.
#include "bench/collectives_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "comm/c10d_baseline.h"
#include "comm/comm.h"
#include "core/device.h"
#include "core/error.h"

namespace cadre::bench {
namespace {

using comm::Communicator;
using comm::ReduceOp;

enum class Collective {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  C10dAllReduce,
  C10dAllGather,
  C10dReduceScatter,
};

// libtorch's own Gloo ops (comm/c10d_baseline.h), the peers of ours: float32, sum or max.
bool is_c10d(Collective c) {
  return c == Collective::C10dAllReduce || c == Collective::C10dAllGather || c == Collective::C10dReduceScatter;
}
bool gathers(Collective c) { return c == Collective::AllGather || c == Collective::C10dAllGather; }
bool scatters(Collective c) { return c == Collective::ReduceScatter || c == Collective::C10dReduceScatter; }

struct CollectiveInfo {
  const char* name;
  Collective kind;
  bool reduces;
};

const CollectiveInfo kCollectives[] = {
    {"all_reduce", Collective::AllReduce, true},
    {"all_gather", Collective::AllGather, false},
    {"reduce_scatter", Collective::ReduceScatter, true},
    {"broadcast", Collective::Broadcast, false},
    {"c10d_all_reduce", Collective::C10dAllReduce, true},
    {"c10d_all_gather", Collective::C10dAllGather, false},
    {"c10d_reduce_scatter", Collective::C10dReduceScatter, true},
};

// nccl-tests' bus bandwidth factors: what each link must carry relative to the data size.
double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::AllReduce:
    case Collective::C10dAllReduce: return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::C10dAllGather:
    case Collective::C10dReduceScatter: return double(n - 1) / n;
    case Collective::Broadcast: return 1.0;
  }
  return 1.0;
}

// Inputs are small integers so every dtype represents every sum exactly:
// rank r's element i is (r + 1) + (i % 3).
at::Tensor pattern(int64_t numel, int64_t first_index, int rank, at::ScalarType dtype) {
  return at::arange(first_index, first_index + numel, at::kLong).remainder(3).add(rank + 1).to(dtype);
}

// What element i of a reduction over n ranks of pattern() must be.
at::Tensor reduced_pattern(int64_t numel, int64_t first_index, int n, ReduceOp op, at::ScalarType dtype) {
  at::Tensor k = at::arange(first_index, first_index + numel, at::kLong).remainder(3);
  at::Tensor sum = k.mul(n).add(int64_t(n) * (n + 1) / 2);
  switch (op) {
    case ReduceOp::Sum: return sum.to(dtype);
    case ReduceOp::Max: return k.add(n).to(dtype);
    case ReduceOp::Avg:
      if (dtype == at::kLong) return sum.div(n, "trunc");
      return sum.to(at::kFloat).div(n).to(dtype);
  }
  return sum;
}

int64_t count_wrong(const at::Tensor& got, const at::Tensor& expected) {
  return got.reshape(-1).to(at::kCPU).ne(expected.reshape(-1)).sum().item<int64_t>();
}

struct Result {
  double time_us = 0;
  int64_t wrong = 0;
};

// Buffers of one size for one collective; `in_place` aliases output and input as nccl-tests does.
struct Case {
  Collective kind;
  at::ScalarType dtype;
  ReduceOp op;
  int64_t count;  // total elements (the printed count)
  bool in_place;
  int rank, n;
  at::Tensor input, output;
  c10::Device device = c10::Device(c10::kCPU);  // where input and output are allocated

  void init() {
    const int64_t per = count / n;
    const auto zeros_here = at::TensorOptions(dtype).device(device);
    auto pattern_here = [&](int64_t numel, int64_t first_index, int r) {
      return pattern(numel, first_index, r, dtype).to(device);
    };
    switch (kind) {
      case Collective::AllReduce:
      case Collective::C10dAllReduce:
        output = pattern_here(count, 0, rank);
        input = output;
        break;
      case Collective::Broadcast:
        output = rank == 0 ? pattern_here(count, 0, 0) : at::zeros({count}, zeros_here);
        input = output;
        break;
      case Collective::AllGather:
      case Collective::C10dAllGather:
        output = at::zeros({count}, zeros_here);
        if (in_place) {
          input = output.narrow(0, rank * per, per);
          input.copy_(pattern_here(per, 0, rank));
        } else {
          input = pattern_here(per, 0, rank);
        }
        break;
      case Collective::ReduceScatter:
      case Collective::C10dReduceScatter:
        input = pattern_here(count, 0, rank);
        output = in_place ? input.narrow(0, rank * per, per) : at::zeros({per}, zeros_here);
        break;
    }
  }

  int64_t wrong() const {
    const int64_t per = count / n;
    switch (kind) {
      case Collective::AllReduce:
      case Collective::C10dAllReduce: return count_wrong(output, reduced_pattern(count, 0, n, op, dtype));
      case Collective::Broadcast: return count_wrong(output, pattern(count, 0, 0, dtype));
      case Collective::AllGather:
      case Collective::C10dAllGather: {
        int64_t bad = 0;
        for (int b = 0; b < n; ++b) bad += count_wrong(output.narrow(0, b * per, per), pattern(per, 0, b, dtype));
        return bad;
      }
      case Collective::ReduceScatter:
      case Collective::C10dReduceScatter: return count_wrong(output, reduced_pattern(per, rank * per, n, op, dtype));
    }
    return 0;
  }
};

class Runner {
 public:
  Runner(const CollectivesBenchOptions& options, const comm::JobEnv& env)
      : options_(options), env_(env), comm_(env, comm_options(options)) {}

  Communicator& comm() { return comm_; }
  // Collective: every rank connects the c10d baseline group at the same point.
  void start_c10d() {
    if (!c10d_) c10d_ = std::make_unique<comm::C10dGloo>(env_, comm_.options().timeout);
  }

  Result run(Case& c) {
    c.init();
    comm_.barrier();
    for (int64_t i = 0; i < options_.warmup; ++i) issue(c).wait();
    device_synchronize(c.device);
    comm_.barrier();
    // Unless --validate, timed ops skip the cross-rank check: the warm-up already matched every rank.
    comm_.set_validate(options_.validate);
    const double per_op = options_.blocking ? median_blocking_op_seconds(c) : mean_pipelined_op_seconds(c);
    comm_.set_validate(true);
    // The slowest rank defines the collective's time.
    at::Tensor t = at::full({1}, per_op, at::kFloat);
    comm_.all_reduce(t, ReduceOp::Max);
    Result r;
    r.time_us = t.item<float>() * 1e6;
    if (options_.check) {
      c.init();
      issue(c).wait();
      at::Tensor bad = at::full({1}, c.wrong(), at::kLong);
      comm_.all_reduce(bad, ReduceOp::Sum);
      r.wrong = bad.item<int64_t>();
    }
    return r;
  }

 private:
  static comm::CommOptions comm_options(const CollectivesBenchOptions& o) {
    comm::CommOptions c;
    c.timeout = std::chrono::seconds(o.timeout_s);
    return c;
  }

  // Every timed op issued at once; the mean time per op.
  double mean_pipelined_op_seconds(Case& c) {
    auto start = std::chrono::steady_clock::now();
    std::vector<comm::Work> works;
    for (int64_t i = 0; i < options_.iters; ++i) works.push_back(issue(c));
    for (auto& w : works) w.wait();
    device_synchronize(c.device);  // a GPU op's wait() only orders streams: wait for the device itself
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
           double(std::max<int64_t>(options_.iters, 1));
  }

  // One op at a time; the median, which a few ops delayed by other processes on a shared
  // machine do not move (they dominate a mean of ~100 µs ops).
  double median_blocking_op_seconds(Case& c) {
    std::vector<double> seconds;
    for (int64_t i = 0; i < options_.iters; ++i) {
      auto start = std::chrono::steady_clock::now();
      issue(c).wait();
      device_synchronize(c.device);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
    return seconds[seconds.size() / 2];
  }

  comm::Work issue(Case& c) {
    switch (c.kind) {
      case Collective::AllReduce: return comm_.all_reduce_async(c.output, c.op);
      case Collective::AllGather: return comm_.all_gather_async(c.output, c.input);
      case Collective::ReduceScatter: return comm_.reduce_scatter_async(c.output, c.input, c.op);
      case Collective::Broadcast: return comm_.broadcast_async(c.output, 0);
      // Synchronous: the baseline runs on c10d's own threads; an empty handle is finished.
      case Collective::C10dAllReduce: c10d_->all_reduce(c.output, c.op); return comm::Work();
      case Collective::C10dAllGather: c10d_->all_gather(c.output, c.input); return comm::Work();
      case Collective::C10dReduceScatter: c10d_->reduce_scatter(c.output, c.input, c.op); return comm::Work();
    }
    return comm::Work();
  }

  CollectivesBenchOptions options_;
  comm::JobEnv env_;
  Communicator comm_;
  std::unique_ptr<comm::C10dGloo> c10d_;
};

// Why a c10d baseline row is not run, or null when it is.
const char* c10d_skipped(Collective c, at::ScalarType dtype, const std::optional<ReduceOp>& op) {
  if (!is_c10d(c)) return nullptr;
  if (c != Collective::C10dAllReduce && !comm::C10dGloo::kHasTensorCollectives)
    return "this libtorch's ProcessGroupGloo has no all_gather / reduce_scatter over flat tensors; 2.3 and later have";
  if (dtype != at::kFloat || op == ReduceOp::Avg) return "the c10d Gloo baseline runs float sum/max only";
  return nullptr;
}

std::string format_time(double us) {
  char buf[32];
  if (us < 10000) std::snprintf(buf, sizeof buf, "%7.2f", us);
  else if (us < 1e6) std::snprintf(buf, sizeof buf, "%7.1f", us);
  else std::snprintf(buf, sizeof buf, "%7.0f", us);
  return buf;
}

void print_header(FILE* out) {
  std::fprintf(out, "#\n");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %26s  %26s\n", "", "", "", "", "", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

}  // namespace

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  CADRE_CONFIG_CHECK(!text.empty(), "flag ", flag, " needs a size");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CADRE_CONFIG_CHECK(used > 0, "flag ", flag, ": '", text, "' is not a size (e.g. 8, 64K, 16M, 1G)");
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else CADRE_CONFIG_CHECK(suffix.empty(), "flag ", flag, ": unknown size suffix in '", text, "' (use K, M or G)");
  CADRE_CONFIG_CHECK(value >= 0, "flag ", flag, " must not be negative");
  return static_cast<int64_t>(value * scale);
}

int run_collectives_bench(const CollectivesBenchOptions& options) {
  CADRE_CONFIG_CHECK(options.min_bytes <= options.max_bytes, "-b ", options.min_bytes, " exceeds -e ", options.max_bytes);
  CADRE_CONFIG_CHECK(options.step_factor >= 2 || options.min_bytes == options.max_bytes,
                     "-f must be at least 2 when -b and -e differ");
  CADRE_CONFIG_CHECK(options.iters >= 1 && options.warmup >= 0, "-n must be >= 1 and -w >= 0");

  std::vector<const CollectiveInfo*> collectives;
  for (const auto& name : options.collectives) {
    bool found = false;
    for (const auto& c : kCollectives)
      if (name == "all" || name == c.name) collectives.push_back(&c), found = true;
    CADRE_CONFIG_CHECK(found, "unknown collective '", name,
                       "' (all_reduce, all_gather, reduce_scatter, broadcast, c10d_all_reduce, c10d_all_gather, "
                       "c10d_reduce_scatter, all)");
  }
  std::vector<at::ScalarType> dtypes;
  for (const auto& d : options.dtypes) {
    if (d == "all") dtypes.insert(dtypes.end(), {at::kFloat, at::kBFloat16, at::kHalf, at::kLong});
    else dtypes.push_back(comm::parse_dtype(d));
  }
  std::vector<ReduceOp> ops;
  for (const auto& o : options.redops) {
    if (o == "all") ops.insert(ops.end(), {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max});
    else ops.push_back(comm::parse_reduce_op(o));
  }

  const c10::Device device = device_select(options.device, "--device");
  const comm::JobEnv env = comm::JobEnv::from_env();
  at::set_num_threads(1);
  Runner runner(options, env);
  const int n = runner.comm().size(), rank = runner.comm().rank();
  FILE* out = stdout;
  const bool printer = rank == 0;
  if (printer) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::fprintf(out, "# cadre bench collectives: nRanks %d minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: %lld iters: %lld validation: %d\n",
                 n, (long long)options.min_bytes, (long long)options.max_bytes, (long long)options.step_factor,
                 (long long)options.warmup, (long long)options.iters, options.check ? 1 : 0);
    std::fprintf(out, "# backend %s (tcp) on %s, pid %d, buffers on %s; times are the slowest rank's per op\n",
                 runner.comm().backend(), host, (int)getpid(), device_describe(device).c_str());
    std::fprintf(out, "# timed ops: cross-rank check %s; %s\n", options.validate ? "on (--validate 1)" : "off",
                 options.blocking ? "each waited before the next is issued, time = median per op (--blocking 1)"
                                  : "issued all at once, time = mean per op");
  }
  for (const CollectiveInfo* c : collectives)
    if (is_c10d(c->kind)) runner.start_c10d();
  int64_t total_wrong = 0;
  for (const CollectiveInfo* c : collectives) {
    for (at::ScalarType dtype : dtypes) {
      std::vector<std::optional<ReduceOp>> redops;
      if (c->reduces) redops.assign(ops.begin(), ops.end());
      else redops.push_back(std::nullopt);
      for (const auto& op : redops) {
        if (const char* why = c10d_skipped(c->kind, dtype, op)) {
          if (printer)
            std::fprintf(out, "#\n# %s %s%s%s: skipped (%s)\n", c->name, comm::dtype_name(dtype).c_str(),
                         op ? " " : "", op ? comm::reduce_op_name(*op) : "", why);
          continue;
        }
        if (printer) {
          std::fprintf(out, "#\n# Collective test: %s  dtype %s%s%s\n", c->name, comm::dtype_name(dtype).c_str(),
                       op ? "  redop " : "", op ? comm::reduce_op_name(*op) : "");
          print_header(out);
        }
        double busbw_sum = 0;
        int busbw_count = 0;
        const int64_t elem = int64_t(c10::elementSize(dtype));
        for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
             bytes = options.step_factor >= 2 ? bytes * options.step_factor : options.max_bytes + 1) {
          int64_t count = bytes / elem;
          if (gathers(c->kind) || scatters(c->kind)) count = count / n * n;
          const int64_t size = count * elem;
          Result results[2];
          for (int place = 0; place < 2; ++place) {
            Case k{c->kind, dtype, op.value_or(ReduceOp::Sum), count, place == 1, rank, n, {}, {}};
            k.device = device;
            results[place] = runner.run(k);
            total_wrong += results[place].wrong;
          }
          if (!printer) continue;
          std::fprintf(out, "  %10lld  %12lld  %8s  %6s  %6d", (long long)size, (long long)count,
                       comm::dtype_name(dtype).c_str(), op ? comm::reduce_op_name(*op) : "none",
                       c->kind == Collective::Broadcast ? 0 : -1);
          for (const Result& r : results) {
            double algbw = r.time_us > 0 ? size / (r.time_us * 1e-6) / 1e9 : 0;
            double busbw = algbw * bus_factor(c->kind, n);
            busbw_sum += busbw;
            ++busbw_count;
            std::string wrong = options.check ? std::to_string(r.wrong) : "N/A";
            std::fprintf(out, "  %s  %6.2f  %6.2f  %5s", format_time(r.time_us).c_str(), algbw, busbw, wrong.c_str());
          }
          std::fprintf(out, "\n");
          std::fflush(out);
        }
        if (printer) {
          std::fprintf(out, "# Out of bounds values : %lld %s\n", (long long)total_wrong, total_wrong ? "FAILED" : "OK");
          std::fprintf(out, "# Avg bus bandwidth    : %g \n", busbw_count ? busbw_sum / busbw_count : 0.0);
        }
      }
    }
  }
  if (printer) std::fprintf(out, "#\n");
  return total_wrong ? 1 : 0;
}

}  // namespace cadre::bench
