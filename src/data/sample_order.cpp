// Epoch permutations for the sample stream.
#include "data/sample_order.h"

#include "data/permutation.h"

namespace cadre {

uint64_t SampleOrder::at(uint64_t global_index) {
  if (split_ == Split::Val) return global_index % total_;
  uint64_t epoch = global_index / total_;
  if (epoch != perm_epoch_) {
    perm_ = permutation(total_, seed_, epoch + 1);
    perm_epoch_ = epoch;
  }
  return perm_[global_index % total_];
}

}  // namespace cadre
