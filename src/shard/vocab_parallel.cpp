// Vocabulary-parallel embedding and cross-entropy.
#include "shard/vocab_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"
#include "shard/tp_collectives.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Which ids fall in this rank's rows, and their row numbers (0 where they do not).
struct LocalIds {
  at::Tensor inside, rows;
};
LocalIds local_ids(const at::Tensor& ids, int64_t vocab_start, int64_t rows) {
  at::Tensor local = ids - vocab_start;
  at::Tensor inside = (local >= 0).logical_and_(local < rows);
  return {inside, local.masked_fill(inside.logical_not(), 0)};
}

constexpr int64_t kIgnoreIndex = -100;  // libtorch's default ignore_index, as the plain loss

struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, comm::Communicator* group) {
    at::Tensor x = logits.to(at::kFloat);
    // Rows whose target is -100 are left out of the sum and the count (every rank has the
    // targets: no collective needed); none counted gives NaN, as at::cross_entropy_loss does.
    const at::Tensor counted = targets.ne(kIgnoreIndex).to(at::kFloat);
    const double n = counted.sum().item<double>();
    // Subtracting the global row maximum keeps exp() in range, as a full softmax would.
    at::Tensor max = std::get<0>(x.max(1)).contiguous();
    group->all_reduce(max, comm::ReduceOp::Max);
    at::Tensor shifted = x - max.unsqueeze(1);
    at::Tensor exp = shifted.exp();
    LocalIds ids = local_ids(targets, vocab_start, logits.size(1));
    at::Tensor target_logit = shifted.gather(1, ids.rows.unsqueeze(1)).squeeze(1) * ids.inside;
    // One all-reduce for both per-row sums: of the exponentials, and of the target's logit
    // (found on exactly one rank).
    at::Tensor sums = at::stack({exp.sum(1), target_logit}).contiguous();
    group->all_reduce(sums, comm::ReduceOp::Sum);
    at::Tensor sum_exp = sums[0], target = sums[1];
    at::Tensor loss = ((sum_exp.log() - target) * counted).sum() / n;
    ctx->save_for_backward({exp.div_(sum_exp.unsqueeze(1)), ids.rows, ids.inside, counted});
    ctx->saved_data["n"] = n;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor softmax = saved[0], rows = saved[1], inside = saved[2], counted = saved[3];
    const double n = ctx->saved_data["n"].toDouble();
    // d(mean loss)/d logits = (softmax - one_hot(target)) / N on this rank's columns, for the
    // N counted rows; 0 for the ignored ones.
    at::Tensor grad = softmax.scatter_add(1, rows.unsqueeze(1), -inside.to(at::kFloat).unsqueeze(1));
    // None counted: a zero gradient, as at::cross_entropy_loss gives (not 0 x NaN).
    grad.mul_(counted.unsqueeze(1)).mul_(n > 0 ? grads[0] / n : at::zeros_like(grads[0]));
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_embedding(const at::Tensor& weight, const at::Tensor& tokens, int64_t vocab_start,
                                    comm::Communicator& group) {
  LocalIds ids = local_ids(tokens, vocab_start, weight.size(0));
  // Rows of other ranks look up row 0 here and are zeroed; the sum over ranks keeps the one
  // rank's row that holds the id.
  at::Tensor partial = at::embedding(weight, ids.rows) * ids.inside.unsqueeze(-1).to(weight.scalar_type());
  return reduce_from_tp_region(partial, group);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        comm::Communicator& group) {
  CADRE_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "vocab_parallel_cross_entropy: logits must be [N, V_local] and targets [N], got ", logits.sizes(), " and ",
              targets.sizes());
  return VocabParallelCrossEntropy::apply(logits, targets, vocab_start, &group);
}

}  // namespace cadre
