// freeze_parameters (freeze.h).
#include "train/freeze.h"

#include <regex>
#include <unordered_set>

#include "core/error.h"

namespace cadre {

int64_t freeze_parameters(torch::nn::Module& model, const std::string& pattern, bool training) {
  const std::regex match(pattern, std::regex::ECMAScript);
  std::unordered_set<const c10::TensorImpl*> frozen, all;  // a tied tensor counts once
  int64_t elements = 0;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
    all.insert(impl);
    if (!std::regex_search(item.key(), match)) continue;
    item.value().set_requires_grad(false);
    if (frozen.insert(impl).second) elements += item.value().numel();
  }
  if (frozen.empty()) {
    std::string some_names;
    for (const auto& item : model.named_parameters(/*recurse=*/true)) {
      if (some_names.size() > 200) break;
      some_names += (some_names.empty() ? "" : ", ") + item.key();
    }
    throw ConfigError(str("train.freeze '", pattern, "' matches no parameter of the model (its names: ", some_names,
                          ", ...)"));
  }
  CADRE_CONFIG_CHECK(!training || frozen.size() < all.size(), "train.freeze '", pattern,
                     "' matches every parameter of the model: nothing would train");
  return elements;
}

}  // namespace cadre
