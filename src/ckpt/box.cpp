// Boxes of tensors: runs over the flattened tensor, and splitting a range of a box into boxes.
#include "ckpt/box.h"

#include "core/error.h"

namespace cadre {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Box box_whole(const std::vector<int64_t>& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

bool box_fits(const Box& box, const std::vector<int64_t>& shape) {
  if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (box.offsets[d] < 0 || box.sizes[d] < 1 || box.sizes[d] > shape[d] || box.offsets[d] > shape[d] - box.sizes[d])
      return false;
  return true;
}

std::string box_text(const Box& box) {
  // A damaged manifest may give offsets and sizes of different lengths: show both as written.
  if (box.offsets.size() != box.sizes.size()) {
    auto list = [](const std::vector<int64_t>& v) {
      std::string t = "[";
      for (size_t d = 0; d < v.size(); ++d) t += str(d ? ", " : "", v[d]);
      return t + "]";
    };
    return str("offsets ", list(box.offsets), " sizes ", list(box.sizes));
  }
  std::string s = "[";
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    // A box read from a damaged manifest may end past int64: show such an end as offset+size.
    int64_t end = 0;
    if (__builtin_add_overflow(box.offsets[d], box.sizes[d], &end))
      s += str(d ? ", " : "", box.offsets[d], ":", box.offsets[d], "+", box.sizes[d]);
    else
      s += str(d ? ", " : "", box.offsets[d], ":", end);
  }
  return s + "]";
}

// The length of box_runs' runs: the box's last dimension, times every dimension before it
// while the ones after are whole.
static int64_t box_run_length(const std::vector<int64_t>& shape, const Box& box) {
  const size_t n = shape.size();
  if (n == 0) return 1;
  size_t k = n - 1;
  int64_t len = box.sizes[k];
  while (k > 0 && box.sizes[k] == shape[k]) {
    --k;
    len *= box.sizes[k];
  }
  return len;
}

int64_t box_run_count(const std::vector<int64_t>& shape, const Box& box) {
  CADRE_CHECK(box_fits(box, shape), "box ", box_text(box), " does not fit a tensor of ", shape.size(), " dimension(s)");
  return box.numel() / box_run_length(shape, box);
}

std::vector<Run> box_runs(const std::vector<int64_t>& shape, const Box& box, int64_t start, int64_t count) {
  CADRE_CHECK(start >= 0 && count >= 0 && start + count <= box.numel(), "elements ", start, "..", start + count,
              " are outside box ", box_text(box));
  std::vector<Run> runs;
  if (count == 0) return runs;
  CADRE_CHECK(box_fits(box, shape), "box ", box_text(box), " does not fit a tensor of ", shape.size(), " dimension(s)");
  const int64_t n = static_cast<int64_t>(shape.size());
  if (n == 0) return {{0, 0, 1}};
  std::vector<int64_t> stride(n, 1);
  for (int64_t d = n - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  // Dimensions k.. form one run: the box spans every dimension after k whole.
  int64_t k = n - 1, len = box.sizes[n - 1];
  while (k > 0 && box.sizes[k] == shape[k]) {
    --k;
    len *= box.sizes[k];
  }
  const int64_t end = start + count;
  for (int64_t i = start / len; i * len < end; ++i) {
    // Run i's first element: its index in dimensions 0..k-1 (row-major over the box), then
    // the box's corner in the rest.
    int64_t at = box.offsets[k] * stride[k], rest = i;
    for (int64_t d = k - 1; d >= 0; --d) {
      at += (box.offsets[d] + rest % box.sizes[d]) * stride[d];
      rest /= box.sizes[d];
    }
    const int64_t lo = std::max(start, i * len), hi = std::min(end, (i + 1) * len);
    runs.push_back({at + (lo - i * len), lo, hi - lo});
  }
  return runs;
}

namespace {

void split_into(const Box& box, size_t dim, int64_t start, int64_t end, std::vector<Box>& out) {
  if (start >= end) return;
  if (dim == box.sizes.size() || (start == 0 && end == Box{{}, {box.sizes.begin() + dim, box.sizes.end()}}.numel())) {
    // The whole remainder of the box: dimensions before `dim` are already pinned.
    out.push_back(box);
    return;
  }
  int64_t inner = 1;  // elements per index of dimension `dim`
  for (size_t d = dim + 1; d < box.sizes.size(); ++d) inner *= box.sizes[d];
  auto rows = [&](int64_t first, int64_t n) {
    Box b = box;
    b.offsets[dim] += first;
    b.sizes[dim] = n;
    return b;
  };
  const int64_t first = start / inner, last = (end - 1) / inner;  // rows touched, inclusive
  if (first == last) {
    split_into(rows(first, 1), dim + 1, start - first * inner, end - first * inner, out);
    return;
  }
  int64_t whole_from = first, whole_to = last + 1;
  if (start % inner != 0) {
    split_into(rows(first, 1), dim + 1, start % inner, inner, out);  // ragged head
    whole_from = first + 1;
  }
  const bool ragged_tail = end % inner != 0;
  if (ragged_tail) whole_to = last;
  if (whole_to > whole_from) out.push_back(rows(whole_from, whole_to - whole_from));
  if (ragged_tail) split_into(rows(last, 1), dim + 1, 0, end % inner, out);
}

}  // namespace

std::vector<Box> box_split_range(const Box& box, int64_t start, int64_t count) {
  CADRE_CHECK(start >= 0 && count >= 0 && start + count <= box.numel(), "elements ", start, "..", start + count,
              " are outside box ", box_text(box));
  std::vector<Box> out;
  split_into(box, 0, start, start + count, out);
  return out;
}

}  // namespace cadre
