// Reading a deferred model's shards from a Cadre checkpoint (checkpoint_param_source.h).
#include "ckpt/checkpoint_param_source.h"

#include <set>

#include "core/error.h"
#include "core/shape_text.h"

namespace cadre {

CheckpointParamSource::CheckpointParamSource(const std::string& path,
                                             const std::vector<std::pair<std::string, std::vector<int64_t>>>& parameters)
    : reader_(path) {
  const std::string where = str("checkpoint '", reader_.dir(), "' does not fit this model: ");
  std::set<std::string> wanted;
  for (const auto& [name, shape] : parameters) {
    const std::string stored = "model." + name;
    wanted.insert(stored);
    auto it = reader_.manifest().tensors.find(stored);
    CADRE_CONFIG_CHECK(it != reader_.manifest().tensors.end(), where, "it has no tensor '", stored, "'");
    CADRE_CONFIG_CHECK(it->second.shape == shape && it->second.dtype == "float32", where, "tensor '", stored, "' is ",
                       it->second.dtype, " ", shape_text(it->second.shape), " there and float32 ", shape_text(shape),
                       " here (check model.* in the config)");
  }
  for (const auto& [name, record] : reader_.manifest().tensors)
    CADRE_CONFIG_CHECK(name.rfind("model.", 0) != 0 || wanted.count(name), where, "it has tensor '", name,
                       "' that this model lacks (check model.* in the config)");
}

void CheckpointParamSource::read(const std::string& name, int64_t start, int64_t count, float* out) const {
  reader_.read("model." + name, start, count, out);
}

std::string CheckpointParamSource::describe() const { return str("checkpoint ", reader_.dir()); }

}  // namespace cadre
