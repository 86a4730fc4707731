// LoRA over a module tree (lora.h).
#include "models/lora.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <unordered_set>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/text.h"
#include "models/lora_linear.h"

namespace cadre {
namespace {

// A layer name (matched as the layer's name or its last dotted parts), not a regular expression.
bool plain_name(const std::string& entry) {
  for (const char c : entry)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

bool names_layer(const std::string& layer, const std::string& name) {
  return layer == name || ends_with(layer, "." + name);
}

std::vector<std::string> split_targets(const std::string& text, const LoraNames& names) {
  CADRE_CONFIG_CHECK(!text.empty() || !names.defaults.empty(),
                     "lora.targets is empty and the model names no default targets");
  if (text.empty()) return names.defaults;
  std::vector<std::string> entries;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string entry = text.substr(start, comma - start);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    CADRE_CONFIG_CHECK(!entry.empty(), "lora.targets '", text, "' has an empty entry");
    entries.push_back(entry);
    start = comma + 1;
  }
  return entries;
}

// Whether `entry` (one item of lora.targets) names the layer called `layer`.
bool entry_matches(const std::string& entry, const std::string& layer, const LoraNames& names) {
  if (entry == "all-linear") {
    for (const auto& excluded : names.not_all_linear)
      if (names_layer(layer, excluded)) return false;
    return true;
  }
  if (!plain_name(entry)) {
    try {
      return std::regex_match(layer, std::regex(entry, std::regex::ECMAScript));
    } catch (const std::regex_error& e) {
      throw ConfigError(str("lora.targets: '", entry, "' is not a regular expression: ", e.what()));
    }
  }
  std::string name = entry;
  for (const auto& [peft, own] : names.aliases)
    if (entry == peft) name = own;
  return names_layer(layer, name);
}

std::vector<std::pair<std::string, std::shared_ptr<LoraLinear>>> lora_layers(torch::nn::Module& root) {
  std::vector<std::pair<std::string, std::shared_ptr<LoraLinear>>> out;
  for (const auto& item : root.named_modules("", /*include_self=*/false))
    if (auto layer = std::dynamic_pointer_cast<LoraLinear>(item.value())) out.emplace_back(item.key(), layer);
  return out;
}

// Elements [start, start + count) of an adapter factor's initial values.
void adapter_values(const std::string& name, int64_t in_features, uint64_t seed, int64_t start, int64_t count,
                    float* out) {
  if (ends_with(name, ".lora_b")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  const double bound = 1.0 / std::sqrt(double(in_features));
  counter_rng::uniform(counter_rng::stream_key(seed, name), uint64_t(start), count, -bound, bound, out);
}

class LoraInit : public ParamSource {
 public:
  LoraInit(std::shared_ptr<const ParamSource> base, std::map<std::string, int64_t> in_features, uint64_t seed)
      : base_(std::move(base)), in_features_(std::move(in_features)), seed_(seed) {}

  void read(const std::string& name, int64_t start, int64_t count, float* out) const override {
    const auto it = in_features_.find(name);
    if (it == in_features_.end()) return base_->read(name, start, count, out);
    adapter_values(name, it->second, seed_, start, count, out);
  }
  std::string describe() const override {
    return str(base_->describe(), "; LoRA adapters: A uniform (seed ", seed_, "), B zero");
  }

 private:
  std::shared_ptr<const ParamSource> base_;
  std::map<std::string, int64_t> in_features_;  // each adapter factor's layer's input width
  uint64_t seed_;
};

}  // namespace

std::vector<std::string> lora_apply(torch::nn::Module& root, const LoraConfig& c, const LoraNames& names) {
  CADRE_CONFIG_CHECK(c.rank > 0, "lora.rank must be > 0 to add adapters");
  const auto layers = lora_layers(root);
  const std::vector<std::string> entries = split_targets(c.targets, names);
  std::vector<std::string> adapted;
  std::unordered_set<std::string> matched;
  for (const auto& [layer, module] : layers) {
    bool chosen = false;
    for (const auto& entry : entries)
      if (entry_matches(entry, layer, names)) {
        chosen = true;
        matched.insert(entry);
      }
    if (!chosen) continue;
    module->add_adapter(c.rank, c.alpha, c.dropout, layer);
    adapted.push_back(layer);
  }
  for (const auto& entry : entries) {
    if (matched.count(entry)) continue;
    std::string some;
    for (const auto& [layer, module] : layers) {
      if (some.size() > 300) break;
      some += (some.empty() ? "" : ", ") + layer;
    }
    throw ConfigError(str("lora.targets: '", entry, "' matches no linear layer of the model (its layers: ",
                          some.empty() ? "none that can carry an adapter" : some + ", ...", ")"));
  }
  return adapted;
}

int64_t lora_freeze_base(torch::nn::Module& root) {
  int64_t frozen = 0;
  std::unordered_set<const c10::TensorImpl*> seen;  // a tied tensor counts once
  for (auto& item : root.named_parameters(/*recurse=*/true)) {
    if (lora_is_adapter(item.key())) continue;
    item.value().set_requires_grad(false);
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) frozen += item.value().numel();
  }
  return frozen;
}

std::shared_ptr<const ParamSource> lora_init_source(std::shared_ptr<const ParamSource> base, torch::nn::Module& root,
                                                    uint64_t seed) {
  std::map<std::string, int64_t> in_features;
  for (const auto& [layer, module] : lora_layers(root)) {
    if (!module->has_adapter()) continue;
    in_features[layer + ".lora_a"] = in_features[layer + ".lora_b"] = module->lora_a.size(1);
  }
  return std::make_shared<LoraInit>(std::move(base), std::move(in_features), seed);
}

void lora_init_adapters(torch::nn::Module& root, uint64_t seed) {
  c10::NoGradGuard no_grad;
  for (const auto& [layer, module] : lora_layers(root)) {
    if (!module->has_adapter()) continue;
    for (const auto& [suffix, factor] : {std::make_pair(".lora_a", module->lora_a), std::make_pair(".lora_b", module->lora_b)}) {
      CADRE_CHECK(factor.is_contiguous() && factor.scalar_type() == at::kFloat && factor.is_cpu(),
                  "lora_init_adapters: '", layer, suffix, "' is not a contiguous float32 CPU tensor");
      at::Tensor values = factor;
      adapter_values(layer + suffix, module->lora_a.size(1), seed, 0, factor.numel(), values.data_ptr<float>());
    }
  }
}

}  // namespace cadre
