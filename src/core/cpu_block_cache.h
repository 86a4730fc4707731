// Large CPU tensor memory kept for reuse instead of handed back to the kernel after every use.
//
// Why: c10's CPU allocator is posix_memalign/free, and glibc serves blocks above its mmap
// threshold (at most 32 MiB, often far less) with a fresh mmap each time. A training step frees
// and re-allocates the same activation, logit and gradient blocks every step, so each step
// faulted in (and the kernel zeroed) gigabytes of fresh pages: ~12% of the small Llama's bf16
// step went to page faults (docs/DESIGN.md, "Host memory: the CPU block cache"). This cache
// keeps freed blocks of at least `min_block_bytes` and hands them out again to requests of about
// the same size; smaller requests stay with malloc, whose mmap and trim thresholds install()
// sets so that it keeps reusing them (glibc's own adjustment never sees the large blocks).
//
// Blocks of 2 MiB or more are 2 MiB aligned and madvise(MADV_HUGEPAGE)d, so the first touch
// faults once per 2 MiB (where transparent huge pages are enabled for madvise) rather than once
// per 4 KiB. What the cache holds is bounded three ways: before it maps a new block it evicts
// the oldest idle ones while its blocks would exceed the most ever in use at once (so peak
// memory is what it would be without the cache), and moves their pages into the new block
// rather than handing them back for the kernel to zero again; `trim_unused()` (the trainer
// calls it after each step) returns the blocks no request took since the previous call, so
// memory used once (a checkpoint's snapshot, an evaluation) does not stay; and
// `max_cached_bytes` caps the idle blocks at any time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cadre::cpu_block_cache {

struct Options {
  std::size_t min_block_bytes = std::size_t(1) << 20;
  std::size_t max_cached_bytes = std::size_t(4) << 30;
  bool huge_pages = true;
};

struct Stats {
  std::size_t cached_bytes = 0;   // idle blocks, ready for reuse
  std::size_t in_use_bytes = 0;   // blocks handed out and not yet freed
  std::uint64_t reused = 0;       // requests served from the cache
  std::uint64_t mapped = 0;       // requests that mapped a new block
  std::uint64_t unmapped = 0;     // blocks evicted: returned to the kernel or moved into new blocks
  std::size_t recycled_bytes = 0; // bytes of new blocks that are evicted blocks' pages, not fresh ones
};

// Makes this cache c10's CPU allocator for the rest of the process (tensors already allocated
// keep their own deleters). Idempotent; the options of the first call hold. Does nothing when
// the environment says CADRE_CPU_BLOCK_CACHE=0 (to measure without it).
void install(const Options& options = {});
bool installed();

// Returns to the kernel every idle block that no request took since the previous call; the
// bytes returned.
std::size_t trim_unused();

// Returns every idle block to the kernel, and the bound on the blocks kept starts again from
// what is in use now; the bytes returned.
std::size_t release_all();

Stats stats();

}  // namespace cadre::cpu_block_cache
