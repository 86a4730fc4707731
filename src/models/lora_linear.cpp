// LoraLinear (lora_linear.h).
#include "models/lora_linear.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "models/dnnl_linear.h"
#include "models/lora_dropout.h"
#include "shard/deferred_param.h"
#include "shard/tp_collectives.h"

namespace cadre {

LoraLinear::LoraLinear(int64_t in, int64_t out, bool deferred) {
  weight = register_parameter("weight", deferred ? deferred_empty({out, in}) : at::empty({out, in}));
}

at::Tensor LoraLinear::forward(const at::Tensor& x) const {
  const at::Tensor y = linear_no_bias(x, weight);
  return has_adapter() ? y + adapter(x) : y;
}

void LoraLinear::add_adapter(int64_t rank, double alpha, double dropout_p, std::string layer_name) {
  CADRE_CHECK(!has_adapter(), "LoraLinear: the layer already has an adapter");
  CADRE_CHECK(rank > 0 && alpha > 0 && dropout_p >= 0 && dropout_p < 1, "LoraLinear: rank ", rank, ", alpha ", alpha,
              ", dropout ", dropout_p, " (need rank > 0, alpha > 0, dropout in [0, 1))");
  const int64_t out = weight.size(0), in = weight.size(1);
  const bool deferred = has_no_storage(weight);
  auto make = [&](int64_t rows, int64_t cols) { return deferred ? deferred_empty({rows, cols}) : at::empty({rows, cols}); };
  lora_a = register_parameter("lora_a", make(rank, in));
  lora_b = register_parameter("lora_b", make(out, rank));
  scale = alpha / double(rank);
  dropout = dropout_p;
  name = std::move(layer_name);
}

at::Tensor LoraLinear::adapter(const at::Tensor& x) const {
  at::Tensor in = x;
  if (dropout > 0 && is_training()) {
    // A row-parallel rank's input is its slice of the columns: it draws that slice of the mask.
    const int64_t columns = x.size(-1), ranks = tp_group && tp_split == 1 ? tp_group->size() : 1;
    const int64_t offset = ranks > 1 ? tp_group->rank() * columns : 0;
    in = lora_dropout(x, dropout, name, offset, columns * ranks);
  }
  at::Tensor a = lora_a, b = lora_b;
  // Under tensor parallelism the factor every rank holds whole gets only this rank's part of its
  // gradient: column-parallel, A's gradient sums B_t^T dy_t over the ranks' output rows t;
  // row-parallel, B's sums dy (A_t x_t)^T over the ranks' input columns. Reading it through
  // copy_to_tp_region sums that gradient over the group (and the forward is unchanged), so every
  // rank's copy gets the whole gradient, as on one rank.
  if (tp_group && tp_split == 0) a = copy_to_tp_region(a, *tp_group);
  if (tp_group && tp_split == 1) b = copy_to_tp_region(b, *tp_group);
  return linear_no_bias(linear_no_bias(in, a), b) * scale;  // PEFT's order: B(A(x)) * scaling
}

int lora_factor_split_dim(int weight_split_dim, bool factor_a) {
  if (weight_split_dim == 0) return factor_a ? -1 : 0;  // B [out, rank] shares W's rows
  if (weight_split_dim == 1) return factor_a ? 1 : -1;  // A [rank, in] shares W's columns
  return -1;
}

}  // namespace cadre
