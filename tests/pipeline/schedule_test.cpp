// Pipeline schedules on paper (pipeline/schedule.h, pipeline/simulation.h): every stage runs each
// micro-batch's forward and backward through each of its chunks exactly once; the orders never
// deadlock (the simulation runs them all); GPipe and 1F1B have the bubble (p - 1) / (m + p - 1)
// of equal-cost forwards and backwards, 1F1B holds at most p - s micro-batches on stage s where
// GPipe holds m, and interleaving with v chunks shrinks the bubble (to (p - 1) / (v m + p - 1)
// with equal costs); an order that waits on itself is named as a deadlock.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "core/error.h"
#include "pipeline/schedule.h"
#include "pipeline/simulation.h"

namespace {

using cadre::pipeline::Action;
using cadre::pipeline::PipelineShape;
using cadre::pipeline::Schedule;

void expect_each_action_once(Schedule schedule, const PipelineShape& s) {
  for (int64_t stage = 0; stage < s.stages; ++stage) {
    const auto actions = cadre::pipeline::stage_actions(schedule, s, stage);
    std::set<std::tuple<int, int64_t, int64_t>> seen;
    for (const Action& a : actions) {
      EXPECT_TRUE(seen.insert({int(a.kind), a.micro, a.chunk}).second) << describe(a) << " twice on stage " << stage;
      EXPECT_TRUE(a.micro >= 0 && a.micro < s.micro_batches && a.chunk >= 0 && a.chunk < s.chunks) << describe(a);
    }
    EXPECT_EQ(int64_t(actions.size()), 2 * s.micro_batches * s.chunks) << "stage " << stage;
  }
}

TEST(PipelineSchedule, EveryStageRunsEachForwardAndBackwardOnceWithoutDeadlock) {
  for (int64_t p : {1, 2, 3, 4})
    for (int64_t m : {1, 2, 4, 5, 8}) {
      for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
        const PipelineShape s{p, m, 1};
        expect_each_action_once(schedule, s);
        EXPECT_NO_THROW(cadre::pipeline::simulate(schedule, s)) << schedule_name(schedule) << " p " << p << " m " << m;
      }
      if (m % p != 0 || p == 1) continue;
      for (int64_t v : {2, 3}) {
        const PipelineShape s{p, m, v};
        expect_each_action_once(Schedule::Interleaved, s);
        EXPECT_NO_THROW(cadre::pipeline::simulate(Schedule::Interleaved, s)) << "interleaved p " << p << " m " << m
                                                                              << " v " << v;
      }
    }
}

TEST(PipelineSchedule, OneFOneBKeepsGPipesBubbleWithAtMostPMinusSMicroBatchesInFlight) {
  for (int64_t p : {2, 4})
    for (int64_t m : {4, 8, 16}) {
      const PipelineShape s{p, m, 1};
      const double bubble = double(p - 1) / double(m + p - 1);
      const auto gpipe = cadre::pipeline::simulate(Schedule::GPipe, s, 1, 1);
      const auto one_f_one_b = cadre::pipeline::simulate(Schedule::OneFOneB, s, 1, 1);
      EXPECT_NEAR(gpipe.bubble, bubble, 1e-12) << "p " << p << " m " << m;
      EXPECT_NEAR(one_f_one_b.bubble, bubble, 1e-12) << "p " << p << " m " << m;
      for (int64_t stage = 0; stage < p; ++stage) {
        EXPECT_EQ(gpipe.peak_in_flight[size_t(stage)], m);
        EXPECT_EQ(one_f_one_b.peak_in_flight[size_t(stage)], std::min(m, p - stage)) << "stage " << stage;
      }
      // Backwards costing twice the forwards (the usual ratio): 1F1B is no slower than GPipe.
      EXPECT_LE(cadre::pipeline::simulate(Schedule::OneFOneB, s).makespan,
                cadre::pipeline::simulate(Schedule::GPipe, s).makespan + 1e-9);
    }
}

TEST(PipelineSchedule, InterleavingShrinksTheBubble) {
  for (int64_t p : {2, 4})
    for (int64_t m : {p, 2 * p, 4 * p}) {
      const double plain = cadre::pipeline::simulate(Schedule::OneFOneB, {p, m, 1}, 1, 1).bubble;
      for (int64_t v : {2, 4}) {
        // A chunk is 1 / v of a stage's work.
        const auto run = cadre::pipeline::simulate(Schedule::Interleaved, {p, m, v}, 1.0 / double(v), 1.0 / double(v));
        EXPECT_NEAR(run.bubble, double(p - 1) / double(v * m + p - 1), 1e-9) << "p " << p << " m " << m << " v " << v;
        EXPECT_LT(run.bubble, plain) << "p " << p << " m " << m << " v " << v;
      }
    }
}

TEST(PipelineSchedule, AnOrderThatWaitsOnItselfIsNamedAsADeadlock) {
  // Stage 1 asks for micro-batch 1 before 0 while stage 0 waits for its backward of 0 first.
  const PipelineShape s{2, 2, 1};
  std::vector<std::vector<Action>> orders = {
      {{Action::Forward, 0, 0}, {Action::Backward, 0, 0}, {Action::Forward, 1, 0}, {Action::Backward, 1, 0}},
      {{Action::Forward, 1, 0}, {Action::Backward, 1, 0}, {Action::Forward, 0, 0}, {Action::Backward, 0, 0}}};
  try {
    cadre::pipeline::simulate_orders(orders, s, 1, 1);
    ADD_FAILURE() << "the orders deadlock";
  } catch (const cadre::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 0 B0 waits for stage 1 B0"), std::string::npos) << what;
    EXPECT_NE(what.find("stage 1 F1 waits for stage 0 F1"), std::string::npos) << what;
  }
}

TEST(PipelineSchedule, NamesAreCaseInsensitiveAndBadShapesAreConfigErrors) {
  EXPECT_EQ(cadre::pipeline::parse_schedule("GPipe"), Schedule::GPipe);
  EXPECT_EQ(cadre::pipeline::parse_schedule("1F1B"), Schedule::OneFOneB);
  EXPECT_EQ(cadre::pipeline::parse_schedule("Interleaved"), Schedule::Interleaved);
  auto says = [](auto f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  says([] { cadre::pipeline::parse_schedule("zb-h1"); }, "parallel.pp_schedule: 'zb-h1' is not a pipeline schedule");
  says([] { cadre::pipeline::stage_actions(Schedule::Interleaved, {4, 6, 2}, 0); },
       "needs parallel.pp_microbatches (6) to be a multiple of parallel.pp_size (4)");
  says([] { cadre::pipeline::stage_actions(Schedule::OneFOneB, {2, 4, 2}, 0); }, "runs one chunk per stage");
  says([] { cadre::pipeline::stage_actions(Schedule::GPipe, {2, 0, 1}, 0); }, "parallel.pp_microbatches must be >= 1");
}

}  // namespace
