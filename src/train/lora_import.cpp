// lora.init_from (lora_import.h).
#include "train/lora_import.h"

#include <map>

#include "ckpt/peft_folder.h"
#include "core/error.h"
#include "core/lora_naming.h"
#include "models/registry.h"

namespace cadre {
namespace {

std::shared_ptr<PeftAdapterFolder> open_adapter(const Config& c) {
  const auto names = model_state_dict_adapter(c);
  CADRE_CONFIG_CHECK(names, "lora.init_from: model.arch ", c.model.arch, " has no Hugging Face names");
  return std::make_shared<PeftAdapterFolder>(c.lora.init_from, *names, "lora.init_from");
}

class PeftAdapterSource : public ParamSource {
 public:
  PeftAdapterSource(std::shared_ptr<const ParamSource> base, std::shared_ptr<PeftAdapterFolder> adapter)
      : base_(std::move(base)), adapter_(std::move(adapter)) {}

  void read(const std::string& name, int64_t start, int64_t count, float* out) const override {
    if (!adapter_->factors().count(name)) return base_->read(name, start, count, out);
    adapter_->read(name, start, count, out);
  }
  std::string describe() const override {
    return str(base_->describe(), "; LoRA adapters from PEFT folder ", adapter_->dir());
  }

 private:
  std::shared_ptr<const ParamSource> base_;
  std::shared_ptr<PeftAdapterFolder> adapter_;
};

}  // namespace

void lora_init_from_config(Config& c) {
  if (c.lora.init_from.empty()) return;
  const auto adapter = open_adapter(c);
  CADRE_CONFIG_CHECK(c.lora.rank == 0 || c.lora.rank == adapter->rank(), "lora.rank ", c.lora.rank,
                     " is not the rank of lora.init_from '", c.lora.init_from, "' (r = ", adapter->rank(),
                     "); leave lora.rank out or set it to ", adapter->rank());
  c.lora.rank = adapter->rank();
  c.lora.alpha = adapter->alpha();
  c.lora.dropout = adapter->dropout();
  std::string targets;  // exactly the folder's layers
  for (const auto& layer : adapter->layers()) targets += (targets.empty() ? "" : ",") + layer;
  c.lora.targets = targets;
}

std::shared_ptr<const ParamSource> lora_init_from_source(std::shared_ptr<const ParamSource> base, const Config& c,
                                                         Model& model) {
  auto adapter = open_adapter(c);
  std::map<std::string, std::vector<int64_t>> shapes;  // the model's, before tensor parallelism splits them
  for (const auto& p : model.module().named_parameters())
    if (lora_is_adapter(p.key())) shapes[p.key()] = p.value().sizes().vec();
  for (const auto& [own, t] : adapter->factors()) {
    const auto it = shapes.find(own);
    CADRE_CONFIG_CHECK(it != shapes.end(), "lora.init_from: '", t->name, "' has no adapter in the model (", own, ")");
    CADRE_CONFIG_CHECK(t->shape == it->second, "lora.init_from: '", t->name, "' is [", t->shape[0], ", ", t->shape[1],
                       "] in '", adapter->dir(), "', the model's ", own, " is [", it->second[0], ", ", it->second[1],
                       "] (another base?)");
  }
  CADRE_CONFIG_CHECK(adapter->factors().size() == shapes.size(), "lora.init_from: '", adapter->dir(), "' has ",
                     adapter->factors().size(), " adapter factors, the model ", shapes.size());
  return std::make_shared<PeftAdapterSource>(std::move(base), std::move(adapter));
}

}  // namespace cadre
