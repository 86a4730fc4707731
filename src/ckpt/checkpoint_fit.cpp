// The checks of checkpoint_fit.h.
#include "ckpt/checkpoint_fit.h"

#include "core/error.h"
#include "core/shape_text.h"

namespace cadre {

std::string checkpoint_misfit(const CheckpointReader& reader) {
  return str("checkpoint '", reader.dir(), "' does not fit this model: ");
}

void require_float32_tensor(const CheckpointReader& reader, const std::string& name, const std::vector<int64_t>& shape) {
  auto it = reader.manifest().tensors.find(name);
  CADRE_CONFIG_CHECK(it != reader.manifest().tensors.end(), checkpoint_misfit(reader), "it has no tensor '", name, "'");
  CADRE_CONFIG_CHECK(it->second.shape == shape && it->second.dtype == "float32", checkpoint_misfit(reader), "tensor '",
                     name, "' is ", it->second.dtype, " ", shape_text(it->second.shape), " there and float32 ",
                     shape_text(shape), " here (check model.* in the config)");
}

void require_only_model_tensors(const CheckpointReader& reader, const std::function<bool(const std::string&)>& has) {
  for (const auto& [name, record] : reader.manifest().tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    CADRE_CONFIG_CHECK(has(name.substr(6)), checkpoint_misfit(reader), "it has tensor '", name,
                       "' that this model lacks (check model.* in the config)");
  }
}

}  // namespace cadre
