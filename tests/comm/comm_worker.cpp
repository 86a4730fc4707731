// One rank of the communicator tests, started by comm_test with the job environment set.
// `comm_worker <scenario>` checks one behaviour and exits 0 (printing "PASS <scenario>") or 1.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "comm/comm.h"
#include "core/error.h"
#include "core/sysinfo.h"

using cadre::comm::Communicator;
using cadre::comm::ReduceOp;

namespace {

#define EXPECT(cond, ...)                                                                      \
  do {                                                                                         \
    if (!(cond)) throw std::runtime_error(cadre::str("rank ", rank, ": ", __VA_ARGS__, " [line ", __LINE__, "]")); \
  } while (0)

int rank = -1;

// Rank r's element i is (r + 1) + (i % 3): exact in every dtype for the sizes used here.
at::Tensor pattern(int64_t numel, int64_t first, int r, at::ScalarType dtype) {
  return at::arange(first, first + numel, at::kLong).remainder(3).add(r + 1).to(dtype);
}

at::Tensor reduced(int64_t numel, int64_t first, int n, ReduceOp op, at::ScalarType dtype) {
  at::Tensor k = at::arange(first, first + numel, at::kLong).remainder(3);
  at::Tensor sum = k.mul(n).add(int64_t(n) * (n + 1) / 2);
  if (op == ReduceOp::Max) return k.add(n).to(dtype);
  if (op == ReduceOp::Avg) return dtype == at::kLong ? sum.div(n, "trunc") : sum.to(at::kFloat).div(n).to(dtype);
  return sum.to(dtype);
}

std::string name(at::ScalarType t) { return cadre::comm::dtype_name(t); }

// Rank r's values at [first, first + numel): bf16/f16-exact, of mixed magnitudes, so their sums
// are not (a rounded result would differ from the float32 one).
at::Tensor mixed_values(int64_t numel, int64_t first, int r, at::ScalarType dtype) {
  at::Tensor i = at::arange(first, first + numel, at::kFloat);
  return i.mul(0.37).add(r).sin().mul(at::pow(2.0, i.remainder(7))).to(dtype);
}

// bf16/f16 input reduce-scattered into float32 output: the same bits as reducing the input
// widened to float32 (in-band sizes and ring sizes of one and two segments), and unrounded.
void check_widening_reduce_scatter(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (int64_t numel : {int64_t(0), int64_t(1), int64_t(1001), int64_t(3 * 65536 + 5), int64_t((1 << 20) + 3)}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        const at::Tensor input = mixed_values(n * numel, 0, r, dtype);
        at::Tensor wide = at::full({numel}, -1.0f);
        comm.reduce_scatter(wide, input, op);
        at::Tensor reference = at::full({numel}, -1.0f);
        comm.reduce_scatter(reference, input.to(at::kFloat), op);
        EXPECT(at::equal(wide, reference), "widening reduce_scatter ", name(dtype), " ",
               cadre::comm::reduce_op_name(op), " numel ", numel, " differs from the float32 one");
        if (n == 1 || numel < 1000) continue;
        at::Tensor narrow = at::empty({numel}, at::TensorOptions(dtype));
        comm.reduce_scatter(narrow, input, op);
        EXPECT(!at::equal(wide, narrow.to(at::kFloat)), "widening reduce_scatter ", name(dtype), " numel ", numel,
               " was rounded to ", name(dtype));
      }
    }
  }
}

// Every op, dtype and reduction on sizes not divisible by the world size, zero-size tensors,
// in-place variants, and several async ops in flight at once.
void check_ops(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong}) {
    for (int64_t numel : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001), int64_t(3 * 65536 + 5)}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        at::Tensor t = pattern(numel, 0, r, dtype);
        comm.all_reduce(t, op);
        EXPECT(at::equal(t, reduced(numel, 0, n, op, dtype)), "all_reduce ", cadre::comm::reduce_op_name(op), " ",
               name(dtype), " numel ", numel);
        if (op == ReduceOp::Max) continue;
        at::Tensor out = at::full({numel}, -1, at::TensorOptions(dtype));
        comm.reduce_scatter(out, pattern(n * numel, 0, r, dtype), op);
        EXPECT(at::equal(out, reduced(numel, r * numel, n, op, dtype)), "reduce_scatter ", name(dtype), " per-rank ", numel);
        at::Tensor in_place = pattern(n * numel, 0, r, dtype);
        comm.reduce_scatter(in_place.narrow(0, r * numel, numel), in_place, op);
        EXPECT(at::equal(in_place.narrow(0, r * numel, numel), reduced(numel, r * numel, n, op, dtype)),
               "in-place reduce_scatter ", name(dtype), " per-rank ", numel);
      }
      at::Tensor gathered = at::full({n * numel}, -1, at::TensorOptions(dtype));
      comm.all_gather(gathered, pattern(numel, 0, r, dtype));
      for (int b = 0; b < n; ++b)
        EXPECT(at::equal(gathered.narrow(0, b * numel, numel), pattern(numel, 0, b, dtype)), "all_gather ", name(dtype),
               " block ", b, " numel ", numel);
      at::Tensor in_place = at::full({n * numel}, -1, at::TensorOptions(dtype));
      in_place.narrow(0, r * numel, numel).copy_(pattern(numel, 0, r, dtype));
      comm.all_gather(in_place, in_place.narrow(0, r * numel, numel));
      for (int b = 0; b < n; ++b)
        EXPECT(at::equal(in_place.narrow(0, b * numel, numel), pattern(numel, 0, b, dtype)), "in-place all_gather ",
               name(dtype));
      for (int root = 0; root < n; ++root) {
        at::Tensor t = r == root ? pattern(numel, 0, root, dtype) : at::zeros({numel}, at::TensorOptions(dtype));
        comm.broadcast(t, root);
        EXPECT(at::equal(t, pattern(numel, 0, root, dtype)), "broadcast root ", root, " ", name(dtype));
      }
    }
  }
  check_widening_reduce_scatter(comm);
  // bf16 sums accumulate in fp32 and round once: 1 + 2^-9 * n-ranks summed in bf16 would lose
  // every 2^-9 (bf16 has 8 mantissa bits), fp32 accumulation keeps them when they add to 2^-7.
  if (n > 1) {
    at::Tensor small = at::full({5}, r == 0 ? 1.0 : 1.0 / 128 / (n - 1), at::kBFloat16);
    comm.all_reduce(small);
    EXPECT(at::equal(small, at::full({5}, 1.0 + 1.0 / 128, at::kBFloat16)), "bf16 sum not accumulated in fp32: ",
           small[0].item<float>());
  }
  // Several ops in flight; handles complete in issue order.
  std::vector<at::Tensor> ts;
  std::vector<cadre::comm::Work> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(at::full({1000 + i}, float(r + i)));
    works.push_back(comm.all_reduce_async(ts.back()));
  }
  works.push_back(comm.barrier_async());
  for (auto& w : works) w.wait();
  for (int i = 0; i < 8; ++i)
    EXPECT(at::equal(ts[i], at::full({1000 + i}, float(n * (n - 1) / 2 + n * i))), "async all_reduce ", i);
}

// Blocks larger than the ring's reduce-scatter window (16 MiB of float32; 2.25 and 16 windows
// here) reduce exactly, and the op keeps no block-sized buffer: resident memory grows by less
// than a quarter of the widened block (a block-sized scratch would add all of it, and keep it).
void scenario_large_blocks(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const int64_t window = int64_t(4) << 20;  // float32 elements in 16 MiB
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t numel = 2 * window + window / 4 + 3;
    at::Tensor out = at::full({numel}, -1, at::TensorOptions(dtype));
    comm.reduce_scatter(out, pattern(n * numel, 0, r, dtype), ReduceOp::Sum);
    EXPECT(at::equal(out, reduced(numel, r * numel, n, ReduceOp::Sum, dtype)), "reduce_scatter ", name(dtype),
           " of ", numel, " elements a rank");
    const at::Tensor input = mixed_values(n * numel, 0, r, dtype);
    at::Tensor wide = at::empty({numel}), reference = at::empty({numel});
    comm.reduce_scatter(wide, input, ReduceOp::Avg);
    comm.reduce_scatter(reference, input.to(at::kFloat), ReduceOp::Avg);
    EXPECT(at::equal(wide, reference), "widening reduce_scatter ", name(dtype), " of ", numel, " elements a rank");
  }
  if (n > 2) return;  // the bound on memory once, on two ranks (the largest block a rank)
  const int64_t numel = 16 * window;
  const at::Tensor input = at::ones({n * numel}, at::kBFloat16);
  at::Tensor wide = at::zeros({numel});  // touched: resident before the op
  const int64_t before = cadre::process_rss_bytes();
  comm.reduce_scatter(wide, input, ReduceOp::Sum);
  const int64_t grown = cadre::process_rss_bytes() - before, block_bytes = numel * 4;
  EXPECT(at::equal(wide, at::full({numel}, float(n))), "widening reduce_scatter of ", numel, " ones");
  EXPECT(grown < block_bytes / 4, "a reduce_scatter of a ", block_bytes >> 20, " MiB float32 block left ",
         grown >> 20, " MiB more resident (a block-sized scratch)");
}

void scenario_ops(Communicator& comm) {
  check_ops(comm);
  // Sub-groups as HYBRID_SHARD uses them: pretend nodes of 2 ranks when the world allows it.
  const int per_node = comm.size() % 2 == 0 ? 2 : 1;
  auto groups = cadre::comm::make_hybrid_groups(comm, per_node);
  EXPECT(groups.shard->size() == per_node && groups.replica->size() == comm.size() / per_node, "hybrid group sizes");
  at::Tensor t = at::full({3}, float(comm.rank()));
  groups.shard->all_reduce(t);
  const int node = comm.rank() / per_node;
  float expected = 0;
  for (int i = 0; i < per_node; ++i) expected += node * per_node + i;
  EXPECT(at::equal(t, at::full({3}, expected)), "shard group all_reduce gave ", t[0].item<float>(), " expected ", expected);
  check_ops(*groups.replica);
  // Rank 0 hosts the store the sub-groups use: nobody leaves before everyone is done.
  comm.barrier();
}

std::string error_of(const std::function<void()>& op) {
  try {
    op();
  } catch (const cadre::Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "no error";
}

// Ranks pass different sizes, different ops, or ops of which one carries its data with the
// header and the other does not: every rank gets an error naming both calls, nothing hangs,
// nothing is written to the outputs, and the communicator stays usable (the connections stay
// in step: a large all_reduce afterwards moves the right data).
void scenario_mismatch(Communicator& comm) {
  const int r = comm.rank();
  at::Tensor t = at::ones({10 + r});
  std::string error = error_of([&] { comm.all_reduce(t); });
  EXPECT(error.find("ranks called different ops or sizes") != std::string::npos, "no mismatch error: '", error, "'");
  EXPECT(error.find("all_reduce(sum) of 11 x float") != std::string::npos, "error does not name rank 1's call: ", error);
  EXPECT(error.find("rank 1 called") != std::string::npos || r == 1, "error does not name rank 1: ", error);
  EXPECT(at::equal(t, at::ones({10 + r})), "a mismatched all_reduce wrote its output");
  EXPECT(!comm.poisoned(), "a mismatch caught before sending must not poison the communicator");

  // Rank 0 moves 4 MiB (header alone first), the others a 3-element all_gather (data with the header).
  at::Tensor big = at::full({1 << 20}, 2.0f);
  at::Tensor gathered = at::full({3 * comm.size()}, -1.0f);
  error = error_of([&] { r == 0 ? comm.all_reduce(big) : comm.all_gather(gathered, at::ones({3})); });
  EXPECT(error.find("all_reduce(sum) of 1048576 x float (4194304 bytes)") != std::string::npos &&
             error.find("all_gather of 3 x float") != std::string::npos,
         "error does not name both calls: ", error);
  EXPECT(at::equal(big, at::full({1 << 20}, 2.0f)) && at::equal(gathered, at::full({3 * comm.size()}, -1.0f)),
         "a mismatched op wrote its output");

  error = error_of([&] { r == 0 ? comm.barrier() : comm.broadcast(t, 0); });
  EXPECT(error.find("barrier") != std::string::npos && error.find("broadcast(root 0)") != std::string::npos,
         "error does not name barrier and broadcast: ", error);
  EXPECT(!comm.poisoned(), "mismatches must not poison the communicator");

  at::Tensor ok = at::ones({4});
  comm.all_reduce(ok);
  EXPECT(at::equal(ok, at::full({4}, float(comm.size()))), "all_reduce after a mismatch");
  big.fill_(float(r));
  comm.all_reduce(big);
  EXPECT(at::equal(big, at::full({1 << 20}, float(comm.size() * (comm.size() - 1) / 2))), "large all_reduce after mismatches");
}

// Rank 1 runs an op that moves nothing with the check off (no header sent, yet it counts), so
// its next op's header carries the next sequence number: both ranks see that they are out of
// step at once (the error is not the timeout's), the error names both collectives and asks for rebuild(), the
// communicator refuses ops until then, and works after it.
void scenario_out_of_step(Communicator& comm) {
  const int r = comm.rank();
  at::Tensor empty = at::ones({0});
  std::string error;
  if (r == 1) {
    comm.set_validate(false);
    comm.all_reduce(empty);
    comm.set_validate(true);
    error = error_of([&] { comm.barrier(); });
  } else {
    error = error_of([&] { comm.all_reduce(empty); });
  }
  EXPECT(error.find("ranks issued different numbers of collectives") != std::string::npos, "no out-of-step error: ", error);
  EXPECT(error.find(r == 1 ? "rank 0 is at collective #1 (generation 0, all_reduce(sum) of 0 x float"
                           : "rank 1 is at collective #2 (generation 0, barrier)") != std::string::npos,
         "error does not name the other rank's collective: ", error);
  EXPECT(error.find("until every rank calls rebuild()") != std::string::npos, "error does not ask for rebuild(): ", error);
  EXPECT(comm.poisoned(), "an out-of-step communicator must refuse further ops");
  comm.rebuild();
  at::Tensor t = at::ones({5});
  comm.all_reduce(t);
  EXPECT(at::equal(t, at::full({5}, 2.0f)), "all_reduce after rebuild");
}

// The last rank skips an op: the others fail after their timeout naming it, the communicator
// refuses further ops until every rank rebuilds it, then it works again.
void scenario_missing(Communicator& comm) {
  const int last = comm.size() - 1;
  // Every rank has connected before the last one rebuilds (which closes its connections: a
  // rank still connecting would see them reset and fail to start).
  comm.barrier();
  if (comm.rank() != last) {
    at::Tensor t = at::ones({1000}, at::kBFloat16);
    std::string error;
    try {
      comm.all_reduce(t);
    } catch (const cadre::Error& e) {
      error = e.what();
    }
    std::printf("error: %s\n", error.c_str());
    EXPECT(error.find("all_reduce(sum) of 1000 x bfloat16 (2000 bytes)") != std::string::npos, "error lacks op/size/dtype: ", error);
    EXPECT(error.find(cadre::str("did not arrive: rank ", last)) != std::string::npos, "error does not name rank ", last, ": ", error);
    // Its progress mark, published in the background (every 2 s with this 8 s timeout), names
    // the op it reached last.
    EXPECT(error.find(cadre::str("rank ", last, " (last op reached: 1 barrier)")) != std::string::npos,
           "error does not name rank ", last, "'s last op: ", error);
    EXPECT(comm.poisoned(), "communicator not marked failed");
    std::string refused;
    try {
      comm.barrier();
    } catch (const cadre::Error& e) {
      refused = e.what();
    }
    EXPECT(refused.find("unusable after an earlier failure") != std::string::npos, "poisoned communicator was reused: ", refused);
  }
  comm.rebuild();
  at::Tensor t = at::ones({33});
  comm.all_reduce(t);
  EXPECT(at::equal(t, at::full({33}, float(comm.size()))), "all_reduce after rebuild");
}

// Communicator::abort, as `cadre run --recovery memory` uses it when its agent reports a lost
// node: the last rank never enters the op (a peer behind a cut link), and rank 0's op ends at
// once with the reason, not after its 60 s deadline; an abort before an op fails that op; a
// rebuild makes the group usable again.
void scenario_abort(Communicator& comm, const cadre::comm::JobEnv& env) {
  const int last = comm.size() - 1;
  // The other ranks must keep their connections open (a rebuild would reset them, a peer error
  // rather than the abort) until rank 0 saw its op aborted: it says so in a file.
  const std::filesystem::path aborted_mark =
      std::filesystem::temp_directory_path() / cadre::str("cadre-comm-abort-", env.master_port);
  comm.barrier();
  if (comm.rank() != 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!std::filesystem::exists(aborted_mark) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT(std::filesystem::exists(aborted_mark), "rank 0 never reported its op aborted");
  }
  if (comm.rank() == 0) {
    auto failure_of = [&](const std::function<void()>& op) {
      try {
        op();
      } catch (const cadre::Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    at::Tensor big = at::ones({1 << 20});  // past the small-op path: a header exchange, then the ring
    const auto started = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      // The op is usually waiting by then; were it not, it fails as it begins (the same error).
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort("node h2 is gone (test)");
    });
    const std::string error = failure_of([&] { comm.all_reduce(big); });
    aborter.join();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("abort: %s (after %.2f s)\n", error.c_str(), waited);
    EXPECT(error.find("all_reduce(sum) of 1048576 x float") != std::string::npos, "error lacks the op: ", error);
    EXPECT(error.find("aborted") != std::string::npos && error.find("node h2 is gone (test)") != std::string::npos,
           "error does not say the op was aborted and why: ", error);
    EXPECT(error.find("timeout") == std::string::npos, "the op waited for its deadline: ", error);
    EXPECT(waited < 30, "the op ended ", waited, " s later, not at the abort");
    EXPECT(comm.poisoned(), "an aborted communicator is not marked failed");
    const std::string refused = failure_of([&] { comm.barrier(); });
    EXPECT(refused.find("unusable after an earlier failure") != std::string::npos, "aborted communicator was reused: ", refused);
    std::ofstream(aborted_mark) << "aborted\n";
  }
  comm.rebuild();
  if (comm.rank() == 0) std::filesystem::remove(aborted_mark);
  at::Tensor t = at::ones({33});
  comm.all_reduce(t);
  EXPECT(at::equal(t, at::full({33}, float(comm.size()))), "all_reduce after rebuild");
  // An abort with no op in flight fails the next op before it sends anything, on that rank.
  if (comm.rank() == last) {
    comm.abort("node h0 is gone (test)");
    std::string error;
    try {
      comm.barrier();
    } catch (const cadre::Error& e) {
      error = e.what();
    }
    EXPECT(error.find("aborted before it began: node h0 is gone (test)") != std::string::npos,
           "an op after abort() did not fail at once: ", error);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: comm_worker ops|refused|mismatch|missing|out_of_step|abort|large_blocks\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    const auto env = cadre::comm::JobEnv::from_env();
    rank = env.rank;
    cadre::comm::CommOptions options;
    // In `missing` the skipping rank waits long enough for the others to time out and rebuild.
    // `refused` is `ops` for ranks a store may refuse: whoever is left waiting for a refused rank
    // gives up after 5 s instead of a minute.
    options.timeout = std::chrono::seconds(scenario == "missing"   ? (env.rank == env.world_size - 1 ? 60 : 8)
                                           : scenario == "refused" ? 5
                                                                   : 60);
    Communicator comm(env, options);
    if (scenario == "ops" || scenario == "refused") scenario_ops(comm);
    else if (scenario == "mismatch") scenario_mismatch(comm);
    else if (scenario == "missing") scenario_missing(comm);
    else if (scenario == "out_of_step") scenario_out_of_step(comm);
    else if (scenario == "abort") scenario_abort(comm, env);
    else if (scenario == "large_blocks") scenario_large_blocks(comm);
    else throw std::runtime_error("unknown scenario " + scenario);
    std::printf("PASS %s rank %d\n", scenario.c_str(), rank);
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL %s rank %d: %s\n", scenario.c_str(), rank, e.what());
    return 1;
  }
}
