// Reading a deferred model's shards from a Hugging Face folder (hf_param_source.h).
#include "ckpt/hf_param_source.h"

#include "core/error.h"

namespace cadre {

HfParamSource::HfParamSource(const std::string& dir, HfImportTarget target)
    : folder_(dir), target_(std::move(target)) {
  for (const HfPlannedTensor& t : hf_plan(folder_, target_)) {
    tensor_of_[t.name] = t.source;
    bytes_total_ += t.source->end - t.source->begin;
  }
}

void HfParamSource::read(const std::string& name, int64_t start, int64_t count, float* out) const {
  auto it = tensor_of_.find(name);
  CADRE_CHECK(it != tensor_of_.end(), "Hugging Face folder '", folder_.dir(), "': the model asked for '", name,
              "', which its plan does not hold");
  folder_.read_float32_range(*it->second, start, count, out);
}

std::string HfParamSource::describe() const { return str("Hugging Face folder ", folder_.dir()); }

}  // namespace cadre
