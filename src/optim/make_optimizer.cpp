// Choosing the optimizer from the config.
#include "optim/make_optimizer.h"

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace cadre {

std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& o, std::vector<at::Tensor> params,
                                          const std::vector<bool>& norm_and_bias_free) {
  std::vector<bool> decay = norm_and_bias_free;
  if (o.no_decay == "none") decay.assign(decay.size(), true);
  else CADRE_CONFIG_CHECK(o.no_decay == "norm_and_bias", "optim.no_decay: unknown '", o.no_decay, "' (norm_and_bias, none)");
  if (o.name == "adamw")
    return std::make_unique<AdamW>(std::move(params), std::move(decay),
                                   AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
  CADRE_CONFIG_CHECK(o.name == "sgd", "optim.name: unknown '", o.name, "' (adamw, sgd)");
  return std::make_unique<Sgd>(std::move(params), std::move(decay),
                               SgdOptions{o.momentum, o.dampening, o.weight_decay, o.nesterov});
}

}  // namespace cadre
