// Splitting a trunk into stages (pipeline/stage_split.h): the balanced split is the lightest
// heaviest stage (checked against every split of small cases), counts the embedding on the first
// stage and the head on the last, and a listed split must name every block once.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "pipeline/stage_split.h"

namespace {

using cadre::pipeline::StageBounds;

// The lightest heaviest stage over every split, by enumeration.
int64_t best_by_enumeration(const std::vector<int64_t>& w, int64_t stages, int64_t before, int64_t after) {
  int64_t best = INT64_MAX;
  StageBounds bounds = {0};
  std::function<void(int64_t)> place = [&](int64_t from) {
    if (int64_t(bounds.size()) == stages) {
      bounds.push_back(int64_t(w.size()));
      const auto loads = cadre::pipeline::stage_weights(w, bounds, before, after);
      best = std::min(best, *std::max_element(loads.begin(), loads.end()));
      bounds.pop_back();
      return;
    }
    for (int64_t cut = from + 1; cut < int64_t(w.size()); ++cut) {
      bounds.push_back(cut);
      place(cut);
      bounds.pop_back();
    }
  };
  place(0);
  return best;
}

TEST(StageSplit, BalancedSplitIsTheLightestHeaviestStage) {
  const std::vector<std::vector<int64_t>> trunks = {{5, 5, 5, 5}, {1, 9, 1, 1, 1, 9, 3}, {4, 4, 4, 4, 4, 4, 4, 4}};
  for (const auto& w : trunks)
    for (int64_t stages = 1; stages <= int64_t(w.size()); ++stages)
      for (auto [before, after] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {6, 0}, {3, 7}}) {
        const StageBounds bounds = cadre::pipeline::balanced_split(w, stages, before, after);
        ASSERT_EQ(int64_t(bounds.size()), stages + 1);
        EXPECT_EQ(bounds.front(), 0);
        EXPECT_EQ(bounds.back(), int64_t(w.size()));
        for (size_t k = 0; k + 1 < bounds.size(); ++k) EXPECT_LT(bounds[k], bounds[k + 1]) << "an empty stage";
        const auto loads = cadre::pipeline::stage_weights(w, bounds, before, after);
        EXPECT_EQ(*std::max_element(loads.begin(), loads.end()), best_by_enumeration(w, stages, before, after))
            << stages << " stages, before " << before << ", after " << after;
      }
  // Llama-like: 8 equal blocks, an embedding and a head of two blocks each, 4 stages: the end
  // stages take fewer blocks.
  EXPECT_EQ(cadre::pipeline::balanced_split(std::vector<int64_t>(8, 10), 4, 20, 20), (StageBounds{0, 1, 4, 7, 8}));
}

TEST(StageSplit, ListedSplitsNameEveryBlockOnce) {
  EXPECT_EQ(cadre::pipeline::split_from_list("3,3,2", 8, 3), (StageBounds{0, 3, 6, 8}));
  auto says = [](const std::string& list, int64_t blocks, int64_t stages, const std::string& text) {
    try {
      cadre::pipeline::split_from_list(list, blocks, stages);
      ADD_FAILURE() << list << ": no error";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  says("3,3", 8, 2, "parallel.pp_split holds 6 blocks; the model has 8");
  says("4,4", 8, 4, "parallel.pp_split lists 2 stages; parallel.pp_size is 4");
  says("4,x,4", 8, 3, "parallel.pp_split: 'x' is not a positive number of blocks");
  says("8,0", 8, 2, "'0' is not a positive number of blocks");
  EXPECT_THROW(cadre::pipeline::balanced_split({1, 2}, 3), cadre::ConfigError);
}

}  // namespace
