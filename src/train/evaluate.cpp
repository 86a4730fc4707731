// Validation loss and accuracy over the data-parallel ranks (see evaluate.h).
#include "train/evaluate.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <vector>

#include "obs/flight_recorder.h"

namespace cadre {
namespace {

// The sample indices of each batch this rank evaluates.
std::vector<std::vector<uint64_t>> eval_batches(const BatchSource& val, const Config& c, int rank, int world) {
  const uint64_t B = static_cast<uint64_t>(c.data.batch_size), W = static_cast<uint64_t>(world);
  const uint64_t N = val.num_samples(), r = static_cast<uint64_t>(rank);
  std::vector<std::vector<uint64_t>> batches;
  if (c.train.eval_batches > 0) {
    for (int64_t b = 0; b < c.train.eval_batches; ++b) {
      std::vector<uint64_t> indices;
      for (uint64_t i = 0; i < B; ++i) indices.push_back((b * B * W + r * B + i) % N);
      batches.push_back(indices);
    }
  } else {
    const uint64_t lo = N * r / W, hi = N * (r + 1) / W, per_rank = (N + W - 1) / W;
    for (uint64_t start = lo; batches.size() < (per_rank + B - 1) / B; start += B) {
      std::vector<uint64_t> indices;
      for (uint64_t i = start; i < std::min(hi, start + B); ++i) indices.push_back(i);
      batches.push_back(indices);
    }
  }
  return batches;
}

}  // namespace

Evaluation evaluate(Model& model, const BatchSource& val, const Config& c, int rank, int world,
                    comm::Communicator* group, const BatchLoss& loss, comm::Communicator* stages) {
  c10::NoGradGuard no_grad;
  model.module().train(false);
  double total = 0, correct = 0, count = 0;
  for (const auto& indices : eval_batches(val, c, rank, world)) {
    const Batch batch = val.at(indices.empty() ? std::vector<uint64_t>{0} : indices);
    LossOutput out = loss ? loss(batch) : model.loss(batch);
    // Without sharding the forward passes need no collective: tell the agent this rank is busy.
    obs::flight_recorder().progressed();
    if (indices.empty() || !out.loss.defined()) continue;  // a pipeline stage before the last: no loss
    // A labelled batch's loss is a mean over its learned targets, and weighs as many.
    const double n = val.labelled() ? double(learned_targets(batch)) : double(indices.size());
    if (n == 0) continue;
    total += out.loss.item<double>() * n;
    correct += out.correct.defined() ? out.correct.item<double>() : -1.0;
    count += n;
  }
  model.module().train(true);
  for (comm::Communicator* ranks : {group, stages}) {  // the stages before the last add zeros
    if (!ranks) continue;
    at::Tensor sums = at::empty({3}, at::kDouble);
    sums[0] = total;
    sums[1] = correct;
    sums[2] = count;
    at::Tensor f = sums.to(at::kFloat);  // the communicator reduces float32
    ranks->all_reduce(f, comm::ReduceOp::Sum);
    total = f[0].item<double>();
    correct = f[1].item<double>();
    count = f[2].item<double>();
  }
  Evaluation e;
  e.loss = count > 0 ? total / count : 0.0;  // a validation split with nothing learned
  if (correct >= 0) e.accuracy = correct / count;
  return e;
}

}  // namespace cadre
