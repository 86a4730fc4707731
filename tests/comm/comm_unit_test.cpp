// In-process checks of the communicator's argument handling and names (one rank, no network),
// and of the progress record the timeout diagnosis reads.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <thread>

#include "comm/comm.h"
#include "comm/progress.h"
#include "core/error.h"

namespace {

using cadre::comm::Communicator;

TEST(CommunicatorSingleRank, OpsAreIdentitiesAndAverageDividesByOne) {
  Communicator comm(cadre::comm::JobEnv{});
  at::Tensor t = at::arange(5, at::kFloat);
  comm.all_reduce(t, cadre::comm::ReduceOp::Avg);
  EXPECT_TRUE(at::equal(t, at::arange(5, at::kFloat)));
  at::Tensor out = at::zeros({5}, at::kBFloat16);
  comm.reduce_scatter(out, at::arange(5, at::kBFloat16));
  EXPECT_TRUE(at::equal(out, at::arange(5, at::kBFloat16)));
  at::Tensor wide = at::zeros({5});
  comm.reduce_scatter(wide, at::arange(5, at::kBFloat16).div(3), cadre::comm::ReduceOp::Avg);
  EXPECT_TRUE(at::equal(wide, at::arange(5, at::kBFloat16).div(3).to(at::kFloat)));
  at::Tensor gathered = at::zeros({3}, at::kLong);
  comm.all_gather(gathered, at::arange(3, at::kLong));
  EXPECT_TRUE(at::equal(gathered, at::arange(3, at::kLong)));
  comm.barrier();
}

TEST(CommunicatorSingleRank, BadArgumentsNameOpAndProblem) {
  Communicator comm(cadre::comm::JobEnv{});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const cadre::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  at::Tensor in = at::ones({4});
  EXPECT_NE(message([&] { comm.all_gather(at::zeros({5}), in); }).find("all_gather: output has 5 elements"), std::string::npos);
  EXPECT_NE(message([&] { comm.reduce_scatter(at::zeros({2}), in); }).find("reduce_scatter: input has 4 elements"), std::string::npos);
  EXPECT_NE(message([&] { comm.all_reduce(at::ones({4}, at::kInt)); }).find("not supported"), std::string::npos);
  EXPECT_NE(message([&] { comm.all_reduce(at::ones({4, 4}).t()); }).find("contiguous"), std::string::npos);
  EXPECT_NE(message([&] { comm.broadcast(in, 3); }).find("root 3"), std::string::npos);
  EXPECT_NE(message([&] { comm.all_gather(at::zeros({4}, at::kHalf), in); }).find("dtype"), std::string::npos);
  // Only a float32 output may differ from its input's dtype (the widening reduce-scatter).
  EXPECT_NE(message([&] { comm.reduce_scatter(at::zeros({4}, at::kBFloat16), in); })
                .find("a different output dtype must be float32"),
            std::string::npos);
  EXPECT_NE(message([&] { comm.reduce_scatter(at::zeros({4}), at::ones({4}, at::kLong)); }).find("differs from input dtype"),
            std::string::npos);
}

TEST(CommNames, ParseDtypesAndReductions) {
  EXPECT_EQ(cadre::comm::parse_dtype("bf16"), at::kBFloat16);
  EXPECT_EQ(cadre::comm::parse_dtype("half"), at::kHalf);
  EXPECT_EQ(cadre::comm::parse_dtype("int64"), at::kLong);
  EXPECT_THROW(cadre::comm::parse_dtype("int8"), cadre::ConfigError);
  EXPECT_EQ(cadre::comm::parse_reduce_op("avg"), cadre::comm::ReduceOp::Avg);
  EXPECT_THROW(cadre::comm::parse_reduce_op("prod"), cadre::ConfigError);
}

std::string stored(c10d::Store& store, const std::string& key) {
  auto v = store.get(key);
  return std::string(v.begin(), v.end());
}

// Ops only update memory: nothing reaches the store until the interval passes or a failing op
// asks for it, and then only the latest op.
TEST(ProgressPublisher, WritesTheLatestOpOnlyWhenAskedOrAtItsInterval) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  {
    cadre::comm::ProgressPublisher publisher(3, std::chrono::hours(1));
    publisher.set_store(store);
    for (int seq = 1; seq <= 100; ++seq) publisher.reached(seq, cadre::str("all_reduce #", seq));
    EXPECT_FALSE(store->check({"arrive/3"}));
    EXPECT_EQ(publisher.publish_now(), "");
    EXPECT_EQ(stored(*store, "arrive/3"), "100 all_reduce #100");
    // A new generation starts from nothing: no mark until its first op.
    auto next = c10::make_intrusive<c10d::HashStore>();
    publisher.set_store(next);
    EXPECT_EQ(publisher.publish_now(), "");
    EXPECT_FALSE(next->check({"arrive/3"}));
  }
  cadre::comm::ProgressPublisher publisher(4, std::chrono::milliseconds(10));
  publisher.set_store(store);
  publisher.reached(7, "barrier");
  // The background thread writes it within its interval; wait for that (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!store->check({"arrive/4"}) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(store->check({"arrive/4"}));
  EXPECT_EQ(stored(*store, "arrive/4"), "7 barrier");
}

}  // namespace
