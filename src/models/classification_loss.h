// Cross-entropy for classifiers, with label smoothing: the target distribution puts
// 1 - label_smoothing + label_smoothing / C on the true class and label_smoothing / C on each
// of the C classes (Szegedy et al. 2016, as torch.nn.functional.cross_entropy's
// label_smoothing), averaged over the batch in float32.
#pragma once

#include <ATen/core/Tensor.h>

namespace cadre {

// logits [B, C] (any floating dtype; computed in float32), target [B] int64 class indices.
at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& target, double label_smoothing);

}  // namespace cadre
