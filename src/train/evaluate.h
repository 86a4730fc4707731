// Validation during training: the mean loss (and accuracy, for classifiers) over a fixed part
// of the validation split, the same figure whatever the number of ranks.
#pragma once

#include <functional>

#include "comm/comm.h"
#include "core/config.h"
#include "models/model.h"
#include "train/batch_source.h"

namespace cadre {

struct Evaluation {
  double loss = 0;
  double accuracy = -1;  // classifiers only
};

// With train.eval_batches = N > 0: over N global batches of the validation split (the first
// N * batch_size * dp samples), each data-parallel rank evaluating its slice of each
// (tensor-parallel ranks the same slice, together), so the figure does not depend on how the
// batch is split across ranks. With 0: the whole split once, each data-parallel rank a
// contiguous part. Collective under sharding: every rank runs the same number of forwards (a
// rank out of samples runs one and ignores it). `rank` and `world` are the data-parallel rank
// and size, `group` the data-parallel ranks.
// Under pipeline stages `loss` runs this stage's part of a batch's forward and returns the loss
// on the last stage only (undefined elsewhere), and `stages` (the pipeline group) brings the
// last stage's sums to every stage.
using BatchLoss = std::function<LossOutput(const Batch&)>;
Evaluation evaluate(Model& model, const BatchSource& val, const Config& c, int rank, int world,
                    comm::Communicator* group, const BatchLoss& loss = {}, comm::Communicator* stages = nullptr);

}  // namespace cadre
