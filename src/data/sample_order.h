// The order a split's samples are read in: the training split in a seeded random order, new
// each epoch; validation in file order. A position (samples consumed globally) is all it
// needs, so resume is exact and means the same at any world size. Shared by every loader.
#pragma once

#include <cstdint>
#include <vector>

namespace cadre {

enum class Split { Train, Val };

class SampleOrder {
 public:
  SampleOrder(uint64_t total, uint64_t seed, Split split) : total_(total), seed_(seed), split_(split) {}
  // The sample at position `global_index` of the stream.
  uint64_t at(uint64_t global_index);

 private:
  uint64_t total_, seed_;
  Split split_;
  uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<uint64_t> perm_;
};

}  // namespace cadre
