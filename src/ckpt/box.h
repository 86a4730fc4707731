// A box of a tensor: the elements offsets[d] .. offsets[d] + sizes[d] - 1 in every dimension d,
// stored row-major (what PyTorch's distributed checkpoint calls a chunk,
// ChunkStorageMetadata). A checkpoint's pieces are boxes, so a tensor-parallel shard (a block
// of rows or of columns) is one piece however the global tensor is laid out; what a rank
// reads back is a box too, or a range of a box's elements (an FSDP shard of a tensor-parallel
// part). Copying between the two goes through runs: stretches of consecutive elements of the
// flattened global tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

struct Box {
  std::vector<int64_t> offsets, sizes;
  int64_t numel() const;  // 1 for a box of a scalar (no dimensions)
};

// The whole tensor of `shape`.
Box box_whole(const std::vector<int64_t>& shape);
// Inside a tensor of `shape`: as many dimensions, offsets >= 0, sizes >= 1, within bounds.
bool box_fits(const Box& box, const std::vector<int64_t>& shape);
// "[0:4, 8:16]" (half-open per dimension), for messages.
std::string box_text(const Box& box);

// Elements [at, at + count) of the flattened tensor are elements [pos, pos + count) of the
// box's own row-major order.
struct Run {
  int64_t at = 0, pos = 0, count = 0;
};

// The runs of elements [start, start + count) of `box` (its row-major order) inside a tensor
// of `shape`, by increasing `at`. Rows merge into one run where the box spans the tensor's
// trailing dimensions whole.
std::vector<Run> box_runs(const std::vector<int64_t>& shape, const Box& box, int64_t start, int64_t count);
inline std::vector<Run> box_runs(const std::vector<int64_t>& shape, const Box& box) {
  return box_runs(shape, box, 0, box.numel());
}

// How many runs box_runs(shape, box) returns, without listing them; `box` must fit `shape`.
int64_t box_run_count(const std::vector<int64_t>& shape, const Box& box);

// Elements [start, start + count) of `box` as boxes whose row-major orders, one after another,
// list those elements in the same order: a ragged head, whole slabs, a ragged tail, recursively
// (at most 2 * dims - 1 boxes). How a contiguous shard of a flattened part becomes pieces.
std::vector<Box> box_split_range(const Box& box, int64_t start, int64_t count);

// Calls copy(dst_pos, src_pos, count) for every stretch where `dst` and `src` (each sorted by
// `at`) hold the same elements; returns the elements matched.
template <typename Copy>
int64_t runs_intersect(const std::vector<Run>& dst, const std::vector<Run>& src, Copy&& copy) {
  int64_t matched = 0;
  size_t i = 0, j = 0;
  while (i < dst.size() && j < src.size()) {
    const Run &a = dst[i], &b = src[j];
    const int64_t lo = a.at > b.at ? a.at : b.at;
    const int64_t a_end = a.at + a.count, b_end = b.at + b.count;
    const int64_t hi = a_end < b_end ? a_end : b_end;
    if (lo < hi) {
      copy(a.pos + (lo - a.at), b.pos + (lo - b.at), hi - lo);
      matched += hi - lo;
    }
    if (a_end <= b_end) ++i;
    else ++j;
  }
  return matched;
}

}  // namespace cadre
