// One rank of a tensor-parallel group, for the multi-process tests of the model-agnostic
// tensor-parallel pieces: every rank builds the same full tensors from one seed, computes the
// full result on its own, then its part through the tensor-parallel op, and prints how far its
// part of the forward value and of every gradient is from the full computation's:
//
//   cross_entropy  vocab_parallel_cross_entropy vs at::cross_entropy_loss (float32 logits,
//                  some rows with logits of ~±60 so the global-max shift matters, some rows
//                  ignored (target -100); all ignored: NaN and a zero gradient; bf16 too)
//   embedding      vocab_parallel_embedding vs at::embedding
//   mlp            copy_to_tp_region -> column-parallel -> relu -> row-parallel ->
//                  reduce_from_tp_region vs the same two-layer network unsplit
//
// Prints "<check> <what> <max abs difference> <scale>" lines; exits 1 when a difference
// exceeds 1e-5 of its scale (float32) or 1e-2 (bf16).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "comm/comm.h"
#include "core/error.h"
#include "shard/tp_collectives.h"
#include "shard/vocab_parallel.h"

namespace {

using cadre::comm::Communicator;

bool report(const std::string& check, const std::string& what, const at::Tensor& mine, const at::Tensor& full,
            double tolerance) {
  const double diff = (mine.to(at::kFloat) - full.to(at::kFloat)).abs().max().item<double>();
  const double scale = std::max(full.to(at::kFloat).abs().max().item<double>(), 1e-12);
  std::printf("%s %s %.3g %.3g\n", check.c_str(), what.c_str(), diff, scale);
  return diff <= tolerance * scale;
}

at::Generator seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

bool check_cross_entropy(Communicator& tp, at::ScalarType dtype, double tolerance) {
  const int64_t n = 24, vocab = 40, part = vocab / tp.size(), start = tp.rank() * part;
  at::Tensor logits = at::randn({n, vocab}, seeded(1)) * 3;
  logits.narrow(0, 0, 4).mul_(20);  // rows whose exp() overflows without the max shift
  logits = logits.to(dtype);
  at::Tensor targets = at::randint(vocab, {n}, seeded(2), at::kLong);
  targets.index_put_({at::arange(1, n, 5)}, -100);  // rows left out (prompt tokens), as the plain loss leaves them
  at::Tensor full = logits.detach().clone().requires_grad_(true);
  at::Tensor full_loss = at::cross_entropy_loss(full.to(at::kFloat), targets);
  full_loss.backward();
  at::Tensor mine = logits.narrow(1, start, part).detach().clone().requires_grad_(true);
  at::Tensor loss = cadre::vocab_parallel_cross_entropy(mine, targets, start, tp);
  loss.backward();
  const std::string name = dtype == at::kFloat ? "cross_entropy" : "cross_entropy_bf16";
  bool ok = report(name, "loss", loss, full_loss, tolerance);
  ok = report(name, "grad", mine.grad(), full.grad().narrow(1, start, part), tolerance) && ok;
  // Nothing counted (a micro-batch without an answer token, weighted 0 by the trainer): NaN as
  // at::cross_entropy_loss, and a zero gradient, not 0 x NaN.
  at::Tensor none = at::full({n}, -100, at::kLong);
  at::Tensor empty = logits.narrow(1, start, part).detach().clone().requires_grad_(true);
  at::Tensor nothing = cadre::vocab_parallel_cross_entropy(empty, none, start, tp);
  (nothing * 0.0).backward();
  const bool zero_grad = std::isnan(nothing.item<float>()) && empty.grad().eq(0).all().item<bool>();
  std::printf("%s nothing_counted %s\n", name.c_str(), zero_grad ? "ok" : "FAILED");
  return zero_grad && ok;
}

bool check_embedding(Communicator& tp) {
  const int64_t vocab = 32, dim = 6, part = vocab / tp.size(), start = tp.rank() * part;
  at::Tensor weight = at::randn({vocab, dim}, seeded(3));
  at::Tensor tokens = at::randint(vocab, {3, 7}, seeded(4), at::kLong);
  at::Tensor probe = at::randn({3, 7, dim}, seeded(5));  // loss = <embedding, probe>
  at::Tensor full = weight.clone().requires_grad_(true);
  at::Tensor full_out = at::embedding(full, tokens);
  (full_out * probe).sum().backward();
  at::Tensor mine = weight.narrow(0, start, part).clone().requires_grad_(true);
  at::Tensor out = cadre::vocab_parallel_embedding(mine, tokens, start, tp);
  (out * probe).sum().backward();
  bool ok = report("embedding", "output", out, full_out, 1e-6);
  ok = report("embedding", "grad", mine.grad(), full.grad().narrow(0, start, part), 1e-6) && ok;
  return ok;
}

bool check_mlp(Communicator& tp) {
  const int64_t n = 5, dim = 8, hidden = 12, part = hidden / tp.size(), start = tp.rank() * part;
  at::Tensor x0 = at::randn({n, dim}, seeded(6));
  at::Tensor w1 = at::randn({hidden, dim}, seeded(7)), w2 = at::randn({dim, hidden}, seeded(8));
  at::Tensor probe = at::randn({n, dim}, seeded(9));
  // Full: y = relu(x w1^T) w2^T.
  at::Tensor fx = x0.clone().requires_grad_(true), f1 = w1.clone().requires_grad_(true), f2 = w2.clone().requires_grad_(true);
  at::Tensor fy = at::linear(at::relu(at::linear(fx, f1)), f2);
  (fy * probe).sum().backward();
  // Split: w1 by rows (column-parallel), w2 by columns (row-parallel).
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor m1 = w1.narrow(0, start, part).clone().requires_grad_(true);
  at::Tensor m2 = w2.narrow(1, start, part).clone().requires_grad_(true);
  at::Tensor y = cadre::reduce_from_tp_region(at::linear(at::relu(at::linear(cadre::copy_to_tp_region(x, tp), m1)), m2), tp);
  (y * probe).sum().backward();
  bool ok = report("mlp", "output", y, fy, 1e-5);
  ok = report("mlp", "input_grad", x.grad(), fx.grad(), 1e-5) && ok;  // summed over the group
  ok = report("mlp", "column_parallel_grad", m1.grad(), f1.grad().narrow(0, start, part), 1e-5) && ok;
  ok = report("mlp", "row_parallel_grad", m2.grad(), f2.grad().narrow(1, start, part), 1e-5) && ok;
  return ok;
}

int run() {
  at::set_num_threads(1);
  Communicator tp(cadre::comm::JobEnv::from_env());
  bool ok = check_cross_entropy(tp, at::kFloat, 1e-5);
  ok = check_cross_entropy(tp, at::kBFloat16, 1e-2) && ok;
  ok = check_embedding(tp) && ok;
  ok = check_mlp(tp) && ok;
  tp.barrier();  // rank 0 hosts the store
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_worker: %s\n", e.what());
    return 1;
  }
}
