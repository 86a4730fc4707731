// Reading a deferred model's shards from a Cadre checkpoint (checkpoint_param_source.h).
#include "ckpt/checkpoint_param_source.h"

#include <set>

#include "ckpt/checkpoint_fit.h"
#include "core/error.h"

namespace cadre {

CheckpointParamSource::CheckpointParamSource(const std::string& path,
                                             const std::vector<std::pair<std::string, std::vector<int64_t>>>& parameters)
    : reader_(path) {
  std::set<std::string> names;
  for (const auto& [name, shape] : parameters) {
    require_float32_tensor(reader_, "model." + name, shape);
    names.insert(name);
  }
  require_only_model_tensors(reader_, [&](const std::string& name) { return names.count(name) > 0; });
}

void CheckpointParamSource::read(const std::string& name, int64_t start, int64_t count, float* out) const {
  reader_.read("model." + name, start, count, out);
}

std::string CheckpointParamSource::describe() const { return str("checkpoint ", reader_.dir()); }

}  // namespace cadre
