// The CPU block cache as c10's CPU allocator: large blocks come back to the next request of
// about their size, small ones stay with malloc, trim_unused() returns what a step did not
// reuse, the idle bytes stay under their cap, and a freed block's old contents never leak into
// a tensor that asks for zeros.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <thread>

#include "core/cpu_block_cache.h"

namespace cache = cadre::cpu_block_cache;

namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

// Every test installs with the same options (ctest runs each test in its own process).
void install() {
  cache::Options o;
  o.min_block_bytes = kMiB;
  o.max_cached_bytes = 16 * kMiB;
  cache::install(o);
  ASSERT_TRUE(cache::installed()) << "CADRE_CPU_BLOCK_CACHE=0 in the test's environment?";
  cache::release_all();  // and the high-water mark starts again: the tests share one process when run by hand
}

at::Tensor floats(std::size_t bytes) { return at::empty({int64_t(bytes / sizeof(float))}, at::kFloat); }
}  // namespace

TEST(CpuBlockCache, AFreedLargeBlockServesTheNextRequestOfAboutItsSize) {
  install();
  const cache::Stats before = cache::stats();
  void* first = nullptr;
  {
    at::Tensor t = floats(6 * kMiB);
    first = t.data_ptr();
  }
  EXPECT_EQ(cache::stats().cached_bytes, 6 * kMiB);
  at::Tensor again = floats(6 * kMiB - 4096);  // rounds to the same 2 MiB multiple
  EXPECT_EQ(again.data_ptr(), first);
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.mapped - before.mapped, 1u);
  EXPECT_EQ(after.reused - before.reused, 1u);
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.in_use_bytes, 6 * kMiB);
}

TEST(CpuBlockCache, ABlockMuchLargerThanTheRequestIsNotHandedOut) {
  install();
  { at::Tensor t = floats(12 * kMiB); }
  const cache::Stats before = cache::stats();
  at::Tensor small = floats(4 * kMiB);  // would waste two thirds of the idle 12 MiB block
  EXPECT_EQ(cache::stats().reused, before.reused);
  EXPECT_EQ(cache::stats().in_use_bytes, 4 * kMiB);
}

// 12 MiB were the most in use at once: mapping 4 MiB beside the idle 12 MiB block would hold
// 16, so 4 MiB of the idle block go first (into the new block), as malloc would have returned
// them.
TEST(CpuBlockCache, ANewBlockNeverTakesTheCachePastTheMostEverInUse) {
  install();
  { at::Tensor t = floats(12 * kMiB); }
  EXPECT_EQ(cache::stats().cached_bytes, 12 * kMiB);
  at::Tensor small = floats(4 * kMiB);
  cache::Stats s = cache::stats();
  EXPECT_EQ(s.in_use_bytes, 4 * kMiB);
  EXPECT_EQ(s.cached_bytes, 8 * kMiB);
  // Another 4 MiB: 4 in use + the 8 idle + 4 would pass 12 again, so half of the 8 goes.
  at::Tensor more = floats(4 * kMiB);
  EXPECT_EQ(cache::stats().cached_bytes, 4 * kMiB) << "4 + 4 + 8 would pass 12: half the 8 went";
  more = at::Tensor();
  s = cache::stats();
  EXPECT_EQ(s.in_use_bytes + s.cached_bytes, 12 * kMiB);
}

TEST(CpuBlockCache, SmallRequestsStayWithMalloc) {
  install();
  const cache::Stats before = cache::stats();
  { at::Tensor t = floats(kMiB / 2); }
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.mapped, before.mapped);
  EXPECT_EQ(after.reused, before.reused);
  EXPECT_EQ(after.cached_bytes, 0u);
}

TEST(CpuBlockCache, HugePageSizedBlocksStartOnAHugePageBoundary) {
  install();
  at::Tensor t = floats(3 * kMiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % (2 * kMiB), 0u);
}

TEST(CpuBlockCache, TrimReturnsOnlyBlocksNoRequestTookSinceThePreviousTrim) {
  install();
  { at::Tensor t = floats(4 * kMiB); }
  EXPECT_EQ(cache::trim_unused(), 0u) << "taken in this interval: kept";
  { at::Tensor reused = floats(4 * kMiB); }
  EXPECT_EQ(cache::trim_unused(), 0u) << "taken again: kept";
  EXPECT_EQ(cache::trim_unused(), 4 * kMiB) << "an interval without a request: returned";
  EXPECT_EQ(cache::stats().cached_bytes, 0u);
}

TEST(CpuBlockCache, IdleBytesStayUnderTheCap) {
  install();
  const cache::Stats before = cache::stats();
  {
    at::Tensor a = floats(8 * kMiB), b = floats(8 * kMiB), c = floats(8 * kMiB);
  }
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.cached_bytes, 16 * kMiB);
  EXPECT_EQ(after.unmapped - before.unmapped, 1u);
}

TEST(CpuBlockCache, ZerosOnAReusedBlockAreZeros) {
  install();
  void* first = nullptr;
  {
    at::Tensor dirty = at::full({int64_t(2 * kMiB / sizeof(float))}, 7.0f);
    first = dirty.data_ptr();
  }
  at::Tensor zeros = at::zeros({int64_t(2 * kMiB / sizeof(float))});
  ASSERT_EQ(zeros.data_ptr(), first);
  EXPECT_EQ(zeros.abs().max().item<float>(), 0.0f);
}

TEST(CpuBlockCache, RawAllocationsOfBothKindsFreeThroughTheRawDeleter) {
  install();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* large = allocator->raw_allocate(4 * kMiB);
  void* small = allocator->raw_allocate(1024);
  EXPECT_EQ(cache::stats().in_use_bytes, 4 * kMiB);
  allocator->raw_deallocate(large);
  allocator->raw_deallocate(small);
  EXPECT_EQ(cache::stats().in_use_bytes, 0u);
  EXPECT_EQ(cache::stats().cached_bytes, 4 * kMiB);
}

TEST(CpuBlockCache, ABlockFreedOnAnotherThreadIsReused) {
  install();
  at::Tensor t = floats(4 * kMiB);
  void* first = t.data_ptr();
  std::thread([moved = std::move(t)]() mutable { moved = at::Tensor(); }).join();
  EXPECT_EQ(floats(4 * kMiB).data_ptr(), first);
}

namespace {
// A block of `bytes` whose floats are all `value`, freed into the cache; its address.
void* free_block_of(std::size_t bytes, float value) {
  at::Tensor t = floats(bytes);
  t.fill_(value);
  return t.data_ptr();
}

// Two blocks of `bytes`, the first holding `first` and the second `second`, freed in that order.
void free_blocks_of(std::size_t bytes, float first, float second) {
  at::Tensor a = floats(bytes), b = floats(bytes);
  a.fill_(first);
  b.fill_(second);
  a = at::Tensor();
  b = at::Tensor();
}

// The floats of `t` from `from_bytes` to `to_bytes` all equal `value`. A plain loop: a tensor op
// would allocate its result through the cache and change what the test looks at.
bool holds(const at::Tensor& t, std::size_t from_bytes, std::size_t to_bytes, float value) {
  const float* p = t.data_ptr<float>();
  for (std::size_t i = from_bytes / sizeof(float); i < to_bytes / sizeof(float); ++i)
    if (p[i] != value) return false;
  return true;
}
}  // namespace

// Fresh pages read as zeros and moved ones keep what their last tensor wrote, so the contents
// show where each part of a new block came from.
TEST(CpuBlockCache, ANewBlockPastTheBoundTakesTheEvictedBlocksPagesInsteadOfFreshOnes) {
  install();
  free_blocks_of(4 * kMiB, 1.0f, 2.0f);  // 8 MiB the most in use
  const cache::Stats before = cache::stats();
  at::Tensor gathered = floats(8 * kMiB);  // no idle block fits, and mapping beside both would pass 8 MiB
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.recycled_bytes - before.recycled_bytes, 8 * kMiB);
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.in_use_bytes, 8 * kMiB);
  EXPECT_TRUE(holds(gathered, 0, 4 * kMiB, 1.0f));
  EXPECT_TRUE(holds(gathered, 4 * kMiB, 8 * kMiB, 2.0f));
}

// A block made of moved pieces may be two kernel mappings (before Linux 6.17 mremap moves a range
// only within one, and the cache moves such a block piece by piece); it moves again whole, and an
// idle block evicted for a smaller request gives up only its front: the rest stays idle.
TEST(CpuBlockCache, ABlockMadeOfMovedPiecesMovesAgainWholeOrInPart) {
  install();
  free_blocks_of(4 * kMiB, 1.0f, 2.0f);
  { at::Tensor gathered = floats(8 * kMiB); }  // pieces: a's pages, then b's
  const cache::Stats before = cache::stats();
  at::Tensor larger = floats(12 * kMiB);  // the most in use grows to 12: the 8 MiB block moves whole
  EXPECT_EQ(cache::stats().recycled_bytes - before.recycled_bytes, 8 * kMiB);
  EXPECT_TRUE(holds(larger, 0, 4 * kMiB, 1.0f));
  EXPECT_TRUE(holds(larger, 4 * kMiB, 8 * kMiB, 2.0f));
  EXPECT_TRUE(holds(larger, 8 * kMiB, 12 * kMiB, 0.0f)) << "the rest is fresh pages";
  larger.fill_(3.0f);
  larger = at::Tensor();

  void* idle = free_block_of(12 * kMiB, 3.0f);
  at::Tensor part = floats(6 * kMiB);  // the idle 12 MiB block is too large to hand out: the bound evicts its front
  EXPECT_NE(part.data_ptr(), idle);
  EXPECT_TRUE(holds(part, 0, 6 * kMiB, 3.0f));
  const cache::Stats s = cache::stats();
  EXPECT_EQ(s.in_use_bytes, 6 * kMiB);
  EXPECT_EQ(s.cached_bytes, 6 * kMiB) << "the rest of the idle block";
  at::Tensor rest = floats(6 * kMiB);
  EXPECT_EQ(static_cast<char*>(rest.data_ptr()), static_cast<char*>(idle) + 6 * kMiB);
  EXPECT_TRUE(holds(rest, 0, 6 * kMiB, 3.0f));
}
