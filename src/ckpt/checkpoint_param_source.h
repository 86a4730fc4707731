// A Cadre checkpoint as the source of a deferred model's parameters (train.init_from naming a
// checkpoint): each rank reads the checksum blocks holding its own shard's elements of each
// model.* tensor while the shard is made, so nothing is initialised at random first. The
// checkpoint is checked against the model when the source opens.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "core/param_source.h"

namespace cadre {

class CheckpointParamSource : public ParamSource {
 public:
  // `parameters`: the model's (name, whole shape) before any tensor parallelism. ConfigError
  // naming the checkpoint and tensor when one is missing, of another shape or dtype, or when
  // the checkpoint holds a model.* tensor the model lacks; CheckpointError when it is damaged.
  CheckpointParamSource(const std::string& path,
                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& parameters);
  void read(const std::string& name, int64_t start, int64_t count, float* out) const override;
  std::string describe() const override;

  // The reader (its bytes read, and the buffers a model loads after its shards).
  const CheckpointReader& reader() const { return reader_; }

 private:
  CheckpointReader reader_;
};

}  // namespace cadre
