// Where parameters built without storage get their values (shard/deferred_param.h): a model's
// own initialisation (a counter-based generator, core/counter_rng.h) or a checkpoint read in
// byte ranges (ckpt/hf_param_source.h). A source answers for any slice of any parameter, so each
// rank asks only for the elements of its own shard and tensor-parallel part, in any order.
#pragma once

#include <cstdint>
#include <string>

namespace cadre {

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // Writes elements [start, start + count) of parameter `name` (the model's whole, logical
  // tensor, flattened row-major) into out[0, count), as float32. Error naming the parameter
  // (and the file, for a checkpoint) when it cannot.
  virtual void read(const std::string& name, int64_t start, int64_t count, float* out) const = 0;
  // "seed 1234", "Hugging Face folder /path": for the log.
  virtual std::string describe() const = 0;
};

}  // namespace cadre
