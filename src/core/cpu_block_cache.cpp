// The CPU block cache: a c10::Allocator that maps large blocks itself and keeps them when freed.
#include "core/cpu_block_cache.h"

#include "core/error.h"
#include "core/log.h"
#include "core/torch_compat.h"

#include <c10/core/CPUAllocator.h>
#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cadre::cpu_block_cache {
namespace {

constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr std::size_t kSmallGrain = std::size_t(64) << 10;

std::size_t round_up(std::size_t n, std::size_t grain) { return (n + grain - 1) / grain * grain; }

// Sizes are rounded so that requests that differ by a few bytes (a shape's padding) share
// blocks: to 2 MiB from 2 MiB up (the huge page), to 64 KiB below.
std::size_t block_size_for(std::size_t n) { return round_up(n, n >= kHugePage ? kHugePage : kSmallGrain); }

// A block's bytes in the order of its address range, as lengths of pieces that each lie within
// one kernel mapping (VMA): before Linux 6.17 mremap moves a range only when a single mapping
// holds it, and a block made of moved pieces is several mappings the kernel need not merge.
using Pieces = std::vector<std::size_t>;

struct IdleBlock {
  void* base;
  Pieces pieces;
  std::uint64_t last_taken;  // trim epoch in which a request last took it
  std::uint64_t freed;       // order of release: the oldest idle block is evicted first
};

// An idle block on its way out of the cache: its pages go to a new block or back to the kernel.
struct Retired {
  char* base;
  std::size_t bytes;
  Pieces pieces;
};

class BlockCache {
 public:
  explicit BlockCache(const Options& o) : options_(o) {}

  void* take(std::size_t n) {
    const std::size_t bytes = block_size_for(n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest idle block that fits, if it is at most an eighth larger than asked for.
      auto it = idle_.lower_bound(bytes);
      if (it != idle_.end() && it->first <= bytes + bytes / 8) {
        void* base = it->second.base;
        in_use_[base] = {it->first, std::move(it->second.pieces), epoch_};
        stats_.cached_bytes -= it->first;
        stats_.in_use_bytes += it->first;
        most_in_use_ = std::max(most_in_use_, stats_.in_use_bytes);
        ++stats_.reused;
        idle_.erase(it);
        return base;
      }
    }
    const Doomed evicted = evict_to_fit(bytes);
    char* base = map_block(bytes);
    auto [pieces, recycled] = recycle_into(base, bytes, evicted);
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_[base] = {bytes, std::move(pieces), epoch_};
    stats_.in_use_bytes += bytes;
    most_in_use_ = std::max(most_in_use_, stats_.in_use_bytes);
    ++stats_.mapped;
    stats_.recycled_bytes += recycled;
    return base;
  }

  // False when `base` is not one of this cache's blocks.
  bool give_back(void* base) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = in_use_.find(base);
    if (it == in_use_.end()) return false;
    InUse block = std::move(it->second);
    in_use_.erase(it);
    stats_.in_use_bytes -= block.bytes;
    if (stats_.cached_bytes + block.bytes > options_.max_cached_bytes) {
      ++stats_.unmapped;
      lock.unlock();
      munmap(base, block.bytes);
      return true;
    }
    idle_.emplace(block.bytes, IdleBlock{base, std::move(block.pieces), block.taken, releases_++});
    stats_.cached_bytes += block.bytes;
    return true;
  }

  std::size_t trim(bool only_unused) {
    Doomed doomed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = idle_.begin(); it != idle_.end();) {
        if (only_unused && it->second.last_taken >= epoch_) ++it;
        else it = retire(it, doomed);
      }
      ++epoch_;
      if (!only_unused) most_in_use_ = stats_.in_use_bytes;
    }
    return unmap_all(doomed);
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  const Options& options() const { return options_; }

 private:
  struct InUse {
    std::size_t bytes;
    Pieces pieces;
    std::uint64_t taken;
  };
  using Idle = std::multimap<std::size_t, IdleBlock>;
  using Doomed = std::vector<Retired>;  // handled once the lock is released

  // Takes an idle block out of the cache's books (caller holds mutex_); the next entry.
  Idle::iterator retire(Idle::iterator it, Doomed& doomed) {
    doomed.push_back({static_cast<char*>(it->second.base), it->first, std::move(it->second.pieces)});
    stats_.cached_bytes -= it->first;
    ++stats_.unmapped;
    return idle_.erase(it);
  }

  static std::size_t unmap_all(const Doomed& doomed) {
    std::size_t bytes = 0;
    for (const Retired& r : doomed) {
      munmap(r.base, r.bytes);
      bytes += r.bytes;
    }
    return bytes;
  }

  // Before mapping `bytes` more: the oldest idle blocks are evicted while the cache's blocks
  // (in use + idle + the new one) would exceed the most ever in use at once, the last of them
  // only in part (its front; the rest stays idle). Memory at its peak is then what malloc's would
  // be; only the blocks a step can use again stay idle. (With activation checkpointing little is
  // in use at a time and many sizes come and go: without this bound the idle blocks of every size
  // added up to 1.6x the peak resident memory.) Returns the evicted blocks for the caller to
  // recycle: whole huge pages first, oldest first among equals.
  Doomed evict_to_fit(std::size_t bytes) {
    Doomed doomed;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t bound = std::max(most_in_use_, stats_.in_use_bytes + bytes);
    while (!idle_.empty() && stats_.in_use_bytes + stats_.cached_bytes + bytes > bound) {
      const std::size_t excess = stats_.in_use_bytes + stats_.cached_bytes + bytes - bound;
      const auto oldest = std::min_element(idle_.begin(), idle_.end(),
                                           [](const auto& a, const auto& b) { return a.second.freed < b.second.freed; });
      const std::size_t cut = round_up(excess, oldest->first >= kHugePage ? kHugePage : kSmallGrain);
      if (cut < oldest->first) retire_front(oldest, cut, doomed);
      else retire(oldest, doomed);
    }
    // Huge-page multiples first: moved to huge-page offsets, their huge pages stay whole (mremap
    // moves them as page-table entries of 2 MiB); one moved to another offset is split into 4 KiB
    // mappings.
    std::stable_partition(doomed.begin(), doomed.end(), [](const Retired& r) { return r.bytes % kHugePage == 0; });
    return doomed;
  }

  // Evicts the first `cut` bytes of an idle block (caller holds mutex_); the rest stays idle, as
  // it was (a huge-page multiple from a huge-page boundary where the block was one).
  void retire_front(Idle::iterator it, std::size_t cut, Doomed& doomed) {
    IdleBlock rest = std::move(it->second);
    const std::size_t bytes = it->first;
    Pieces front;
    for (std::size_t taken = 0; taken < cut;) {
      const std::size_t n = std::min(rest.pieces.front(), cut - taken);
      front.push_back(n);
      taken += n;
      if (n == rest.pieces.front()) rest.pieces.erase(rest.pieces.begin());
      else rest.pieces.front() -= n;
    }
    char* base = static_cast<char*>(rest.base);
    doomed.push_back({base, cut, std::move(front)});
    rest.base = base + cut;
    idle_.erase(it);
    idle_.emplace(bytes - cut, std::move(rest));
    stats_.cached_bytes -= cut;
    ++stats_.unmapped;
  }

  // Moves the evicted blocks' pages into the new, untouched block at `base` (mremap: the page
  // tables move, nothing is copied or zeroed), from its start, and unmaps what does not fit.
  // Why: the blocks a step frees do not come back in the sizes it asks for next (the 64 MiB
  // logits go, 16 MiB activations come), so under the bound above each step unmapped blocks and
  // mapped others of the same total, and the kernel zeroed every fresh page on its first touch:
  // 4% of the small Llama's float32 step (`perf`, clear_page_erms). A moved piece's contents are
  // whatever its last tensor left, as with malloc. Returns the new block's pieces and the bytes
  // it got from the evicted blocks; the rest of it is fresh pages.
  std::pair<Pieces, std::size_t> recycle_into(char* base, std::size_t bytes, const Doomed& evicted) const {
    Pieces pieces;
    std::size_t filled = 0;
    bool moving = true;
    for (const Retired& r : evicted) {
      std::size_t offset = 0;
      for (const std::size_t length : r.pieces) {
        const std::size_t n = std::min(length, bytes - filled);
        if (!moving || n == 0) break;
        if (!move_pages(r.base + offset, base + filled, n)) {
          warn_once_move_refused();
          moving = false;
          remap_fresh(base + filled, bytes - filled);
          break;
        }
        pieces.push_back(n);
        filled += n;
        offset += n;
        if (n < length) break;
      }
      if (offset < r.bytes) munmap(r.base + offset, r.bytes - offset);
    }
    if (filled < bytes) pieces.push_back(bytes - filled);  // the untouched rest: one mapping
    return {pieces, filled};
  }

  // False when the kernel refused (the range not a single mapping, or the mappings' limit); the
  // target range may then be unmapped already.
  static bool move_pages(char* from, char* to, std::size_t n) {
    return mremap(from, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED;
  }

  static void warn_once_move_refused() {
    static std::once_flag once;
    const int error = errno;
    std::call_once(once, [error] {
      log::warn(std::string("cpu block cache: the kernel refused to move an evicted block's pages (mremap: ") +
                std::strerror(error) + "); new blocks take fresh pages where a move is refused");
    });
  }

  // Maps fresh pages over [at, at + n), one mapping, after a refused move.
  void remap_fresh(char* at, std::size_t n) const {
    void* p = mmap(at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CADRE_CHECK(p != MAP_FAILED, "cpu block cache: cannot map ", n, " bytes back after a refused move: ",
                std::strerror(errno));
    if (options_.huge_pages && n >= kHugePage) (void)madvise(at, n, MADV_HUGEPAGE);
  }

  // Blocks of a huge page or more start on a huge-page boundary (map 2 MiB extra, cut the ends
  // off) so that the kernel can back them with huge pages.
  char* map_block(std::size_t bytes) const {
    const bool huge = options_.huge_pages && bytes >= kHugePage;
    const std::size_t span = huge ? bytes + kHugePage : bytes;
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CADRE_CHECK(p != MAP_FAILED, "cpu block cache: cannot map ", span, " bytes for a tensor: ", std::strerror(errno));
    if (!huge) return static_cast<char*>(p);
    auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = round_up(start, kHugePage);
    if (aligned > start) munmap(p, aligned - start);
    const std::uintptr_t tail = aligned + bytes, end = start + span;
    if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
    // Advice only: where transparent huge pages are off, the block is ordinary pages.
    (void)madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
    return reinterpret_cast<char*>(aligned);
  }

  const Options options_;
  std::mutex mutex_;
  Idle idle_;
  std::unordered_map<void*, InUse> in_use_;
  std::uint64_t epoch_ = 0;
  std::uint64_t releases_ = 0;
  std::size_t most_in_use_ = 0;  // the high-water mark of stats_.in_use_bytes
  Stats stats_;
};

BlockCache* g_cache = nullptr;
c10::Allocator* g_fallback = nullptr;  // c10's allocator before install(): small requests
c10::DeleterFnPtr g_fallback_deleter = nullptr;

void release_block(void* base) {
  if (!g_cache->give_back(base)) g_fallback_deleter(base);
}

class BlockCacheAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) CADRE_ALLOCATOR_ALLOCATE_CONST override {
    if (n < g_cache->options().min_block_bytes) return g_fallback->allocate(n);
    void* base = g_cache->take(n);
    return {base, base, &release_block, c10::Device(c10::DeviceType::CPU)};
  }
  // For raw_allocate's callers: frees a block from either source.
  c10::DeleterFnPtr raw_deleter() const override { return g_fallback_deleter ? &release_block : nullptr; }
#if CADRE_TORCH_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif
};

// Below min_block_bytes requests stay with malloc, and glibc's own thresholds then misjudge
// them: its mmap threshold rises only when it frees a mapped chunk larger than the threshold,
// and with the large blocks here it never sees one, so requests from 128 KiB up were mapped and
// unmapped afresh every step, and its trim threshold (twice the mmap threshold) handed the
// top of the heap back between steps. ResNet on MNIST (0.8-1.6 MB activations), 1 rank: 42.0
// -> 39.1-41.2 ms a step with the thresholds below (16 MiB of free heap may stay resident; 64 MiB
// measured no better). Setting either threshold ends glibc's adjustment of both, so both are set.
void set_malloc_thresholds(std::size_t min_block_bytes) {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, int(min_block_bytes));
  mallopt(M_TRIM_THRESHOLD, int(16 * min_block_bytes));
#endif
}

bool disabled_by_environment() {
  const char* v = std::getenv("CADRE_CPU_BLOCK_CACHE");
  return v && std::strcmp(v, "0") == 0;
}

}  // namespace

void install(const Options& options) {
  static std::once_flag once;
  std::call_once(once, [&] {
    if (disabled_by_environment()) return;
    g_fallback = c10::GetCPUAllocator();
    g_fallback_deleter = g_fallback->raw_deleter();
    CADRE_CHECK(g_fallback_deleter, "cpu block cache: c10's CPU allocator has no raw deleter to fall back on");
    g_cache = new BlockCache(options);  // never freed: tensors may outlive every other static
    static BlockCacheAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    set_malloc_thresholds(options.min_block_bytes);
  });
}

bool installed() { return g_cache != nullptr; }

std::size_t trim_unused() { return g_cache ? g_cache->trim(/*only_unused=*/true) : 0; }

std::size_t release_all() { return g_cache ? g_cache->trim(/*only_unused=*/false) : 0; }

Stats stats() { return g_cache ? g_cache->stats() : Stats{}; }

}  // namespace cadre::cpu_block_cache
