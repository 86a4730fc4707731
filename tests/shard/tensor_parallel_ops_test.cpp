// The model-agnostic tensor-parallel pieces against their unsplit computation, on 2 and 4
// ranks (tp_worker.cpp): the vocabulary-parallel cross-entropy equals the full one (value and
// each rank's columns of the gradient) without gathering logits, the vocabulary-parallel
// embedding equals a lookup in the full table, and a column-parallel then row-parallel pair
// through copy_to_tp_region / reduce_from_tp_region equals the unsplit network, input
// gradient included.
#include <gtest/gtest.h>

#include <iostream>

#include "support/rank_processes.h"

namespace {

TEST(TensorParallelOps, MatchTheUnsplitComputation) {
  for (int tp : {2, 4}) {
    auto results = cadre::testing::run_ranks(tp, {TP_WORKER});
    for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "tp " << tp << "\n" << cadre::testing::describe(results);
    // Every check printed its figures on every rank.
    for (const char* check : {"cross_entropy loss", "cross_entropy grad", "cross_entropy_bf16 grad", "embedding grad",
                              "mlp input_grad", "mlp row_parallel_grad"})
      EXPECT_NE(results[tp - 1].output.find(check), std::string::npos) << check << "\n" << results[tp - 1].output;
    std::cout << "[tensor_parallel_ops] tp " << tp << ", rank 0 (check, what, max abs difference, scale):\n"
              << results[0].output << std::flush;
  }
}

}  // namespace
