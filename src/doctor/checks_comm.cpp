// Doctor checks over the communicator: every collective and dtype against closed-form answers,
// all_reduce bandwidth and latency against floors, and a straggler check where every rank times
// the same single-threaded work and the slowest is named.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "comm/comm.h"
#include "core/clock.h"
#include "core/error.h"
#include "doctor/doctor.h"

namespace cadre::doctor {
namespace {

using comm::ReduceOp;

// Rank r's element i is (r + 1) + (i % 3): exact in every dtype for small worlds.
at::Tensor pattern(int64_t numel, int64_t first, int rank, at::ScalarType dtype) {
  return at::arange(first, first + numel, at::kLong).remainder(3).add(rank + 1).to(dtype);
}

at::Tensor reduced(int64_t numel, int64_t first, int n, ReduceOp op, at::ScalarType dtype) {
  at::Tensor k = at::arange(first, first + numel, at::kLong).remainder(3);
  at::Tensor sum = k.mul(n).add(int64_t(n) * (n + 1) / 2);
  if (op == ReduceOp::Max) return k.add(n).to(dtype);
  if (op == ReduceOp::Avg) return dtype == at::kLong ? sum.div(n, "trunc") : sum.to(at::kFloat).div(n).to(dtype);
  return sum.to(dtype);
}

}  // namespace

std::vector<CheckResult> check_collectives(comm::Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const int64_t per = 1001;  // odd, and all_reduce's n*per+3 is not divisible by the world size
  std::vector<CheckResult> results;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong}) {
    CheckResult c{"collectives_" + comm::dtype_name(dtype)};
    std::vector<std::string> wrong;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      at::Tensor t = pattern(n * per + 3, 0, r, dtype);
      comm.all_reduce(t, op);
      if (!at::equal(t, reduced(n * per + 3, 0, n, op, dtype))) wrong.push_back(str("all_reduce(", comm::reduce_op_name(op), ")"));
      if (op == ReduceOp::Max) continue;
      at::Tensor out = at::empty({per}, at::TensorOptions(dtype));
      comm.reduce_scatter(out, pattern(n * per, 0, r, dtype), op);
      if (!at::equal(out, reduced(per, r * per, n, op, dtype))) wrong.push_back(str("reduce_scatter(", comm::reduce_op_name(op), ")"));
    }
    at::Tensor gathered = at::empty({n * per}, at::TensorOptions(dtype));
    comm.all_gather(gathered, pattern(per, 0, r, dtype));
    for (int b = 0; b < n; ++b)
      if (!at::equal(gathered.narrow(0, b * per, per), pattern(per, 0, b, dtype))) {
        wrong.push_back(str("all_gather(block ", b, ")"));
        break;
      }
    at::Tensor bcast = r == n - 1 ? pattern(per, 0, n - 1, dtype) : at::zeros({per}, at::TensorOptions(dtype));
    comm.broadcast(bcast, n - 1);
    if (!at::equal(bcast, pattern(per, 0, n - 1, dtype))) wrong.push_back("broadcast");
    comm.barrier();
    c.ok = wrong.empty();
    c.value = double(wrong.size());
    c.unit = "wrong ops";
    if (c.ok) {
      c.detail = "all_reduce sum/avg/max, reduce_scatter sum/avg, all_gather, broadcast, barrier exact";
    } else {
      c.detail = "wrong results from:";
      for (const auto& w : wrong) c.detail += " " + w;
    }
    results.push_back(c);
  }
  return results;
}

CheckResult check_all_reduce_on(comm::Communicator& comm, const c10::Device& device, const std::string& gpu) {
  const int n = comm.size(), r = comm.rank();
  const int64_t numel = n * 1001 + 3;
  CheckResult c{"device_all_reduce"};
  c.gpu = gpu;
  std::vector<std::string> wrong;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor t = pattern(numel, 0, r, dtype).to(device);
    comm.all_reduce(t, ReduceOp::Sum);
    if (!at::equal(t.to(at::kCPU), reduced(numel, 0, n, ReduceOp::Sum, dtype))) wrong.push_back(comm::dtype_name(dtype));
  }
  c.ok = wrong.empty();
  c.value = double(wrong.size());
  c.unit = "wrong ops";
  c.detail = str("all_reduce(sum) of float32 and bfloat16 on ", device, gpu.empty() ? "" : " " + gpu);
  for (const auto& w : wrong) c.detail += (w == wrong.front() ? ": wrong results in " : ", ") + w;
  return c;
}

CheckResult check_bandwidth(comm::Communicator& comm, const DoctorOptions& o) {
  CheckResult c{"allreduce_busbw"};
  const int64_t numel = (16 << 20) / 4;
  at::Tensor t = at::ones({numel});
  comm.all_reduce(t);
  comm.barrier();
  // Best of 5: the link's capability, not a moment of contention on a shared host.
  comm.set_validate(false);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto start = std::chrono::steady_clock::now();
    comm.all_reduce(t);
    best = std::min(best, seconds_since(start));
  }
  at::Tensor time = at::full({1}, best, at::kFloat);
  comm.set_validate(true);
  comm.all_reduce(time, ReduceOp::Max);
  const int n = comm.size();
  c.value = n > 1 ? numel * 4.0 / time.item<float>() / 1e9 * 2.0 * (n - 1) / n : 0;
  c.limit = o.busbw_floor_gbps;
  c.unit = "GB/s";
  c.rank = -1;
  c.ok = n == 1 || c.value >= c.limit;
  c.detail = n > 1 ? "float32 all_reduce of 16 MiB, best of 5, bus bandwidth (nccl-tests definition)" : "single rank: not measured";
  return c;
}

CheckResult check_latency(comm::Communicator& comm, const DoctorOptions& o) {
  CheckResult c{"allreduce_latency"};
  at::Tensor t = at::ones({2});
  comm.barrier();
  // Median of 50 single ops on each rank; the slowest rank's median is reported.
  comm.set_validate(false);
  std::vector<double> times;
  for (int i = 0; i < 50; ++i) {
    auto start = std::chrono::steady_clock::now();
    comm.all_reduce(t);
    times.push_back(seconds_since(start));
  }
  std::nth_element(times.begin(), times.begin() + 25, times.end());
  at::Tensor time = at::full({1}, times[25] * 1e6, at::kFloat);
  comm.set_validate(true);
  comm.all_reduce(time, ReduceOp::Max);
  c.value = time.item<float>();
  c.limit = o.latency_ceiling_us;
  c.unit = "us";
  c.rank = -1;
  c.ok = c.value <= c.limit;
  c.detail = "float32 all_reduce of 8 bytes, median of 50";
  return c;
}

CheckResult check_straggler(comm::Communicator& comm, const DoctorOptions& o) {
  // The same single-threaded work on every rank, started together, in several rounds; each
  // rank keeps its fastest round, so a moment of noise passes while a rank that is slow all
  // along (sharing its core, throttled, on a slow BLAS) shows up.
  at::set_num_threads(1);
  at::Tensor a = at::randn({256, 256}), b = at::randn({256, 256});
  at::mm(a, b);
  double mine = 1e30;
  for (int round = 0; round < 7; ++round) {
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 60; ++i) a = at::mm(a, b).mul_(0.05f);
    mine = std::min(mine, seconds_since(start));
  }
  const int n = comm.size();
  at::Tensor times = at::zeros({n});
  comm.all_gather(times, at::full({1}, mine, at::kFloat));
  const float* tp = times.data_ptr<float>();
  int slowest = 0, fastest = 0;
  for (int r = 1; r < n; ++r) {
    if (tp[r] > tp[slowest]) slowest = r;
    if (tp[r] < tp[fastest]) fastest = r;
  }
  CheckResult c{"straggler"};
  c.value = tp[slowest] / std::max(tp[fastest], 1e-9f);
  c.limit = o.straggler_ratio;
  c.unit = "x slowest/fastest";
  c.ok = c.value <= c.limit;
  c.rank = c.ok ? -1 : slowest;
  std::string per_rank;
  for (int r = 0; r < n; ++r) per_rank += str(r ? ", " : "", "rank ", r, " ", int(tp[r] * 1e4) / 10.0, " ms");
  c.detail = str(c.ok ? "" : str("rank ", slowest, " is slow: "), "same matmul loop (best of 7) took ", per_rank);
  return c;
}

}  // namespace cadre::doctor
