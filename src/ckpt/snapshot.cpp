// Packing staged checkpoint slices into one buffer.
#include "ckpt/snapshot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "ckpt/manifest.h"
#include "core/error.h"
#include "core/log.h"

namespace cadre {

size_t snapshot_piece_bytes(const SnapshotPiece& piece) {
  return static_cast<size_t>(piece.box.numel() * dtype_element_size(piece.dtype));
}

namespace {
// Offsets rounded to 64 bytes keep every piece aligned for its dtype and for vector copies.
size_t aligned(size_t offset) { return (offset + 63) / 64 * 64; }
}  // namespace

void Snapshot::reserve(const std::vector<size_t>& piece_bytes) {
  size_t end = size_;
  for (size_t n : piece_bytes) end = aligned(end) + n;
  if (bytes_.size() < end) bytes_.resize(end);
}

char* Snapshot::add(SnapshotPiece piece) {
  const size_t n = snapshot_piece_bytes(piece);
  piece.offset = aligned(size_);
  size_ = piece.offset + n;
  if (bytes_.size() < size_) bytes_.resize(size_ + size_ / 4);  // headroom: later snapshots rarely regrow
  pieces_.push_back(std::move(piece));
  return bytes_.data() + pieces_.back().offset;
}

void Snapshot::add_borrowed(SnapshotPiece piece, const char* bytes) {
  piece.offset = 0;
  piece.borrowed = bytes;
  pieces_.push_back(std::move(piece));
}

void Snapshot::finish() {
  std::vector<std::function<void(Snapshot&)>> fills;
  fills.swap(fills_);
  for (auto& fill : fills) fill(*this);
}

void Snapshot::release_pages() {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(bytes_.data());
  // Only whole pages inside the buffer: the partial pages at either end may hold the
  // allocator's bookkeeping of neighbouring blocks.
  const uintptr_t begin = (start + page - 1) / page * page, end = (start + bytes_.size()) / page * page;
  if (end <= begin) return;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0)
    log::warn(str("checkpoint: could not release the ", (end - begin) >> 20,
                  " MiB staging buffer's pages (madvise: ", std::strerror(errno), "); it stays resident"));
}

}  // namespace cadre
