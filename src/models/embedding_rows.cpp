// The embedding with a row-sparse gradient (see embedding_rows.h).
#include "models/embedding_rows.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct EmbeddingRows : public torch::autograd::Function<EmbeddingRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& tokens) {
    ctx->save_for_backward({tokens});
    ctx->saved_data["vocab"] = weight.size(0);
    ctx->saved_data["dtype"] = static_cast<int64_t>(weight.scalar_type());
    return at::embedding(weight, tokens);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor tokens = ctx->get_saved_variables()[0].reshape({-1});
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor g = grads[0].reshape({tokens.numel(), -1});
    // Sorted distinct tokens and, for each position, its row among them.
    auto [rows, row_of] = at::_unique(tokens, /*sorted=*/true, /*return_inverse=*/true);
    at::Tensor sums = at::zeros({rows.numel(), g.size(1)}, g.options().dtype(at::kFloat));
    sums.index_add_(0, row_of, g.to(at::kFloat));
    at::Tensor grad = at::sparse_coo_tensor(rows.unsqueeze(0), sums.to(dtype), {vocab, g.size(1)});
    return {grad._coalesced_(true), at::Tensor()};
  }
};

}  // namespace

at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& tokens) {
  return EmbeddingRows::apply(weight, tokens);
}

}  // namespace cadre
