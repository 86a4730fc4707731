// Packing staged checkpoint slices into one buffer.
#include "ckpt/snapshot.h"

#include "ckpt/manifest.h"

namespace cadre {

size_t snapshot_piece_bytes(const SnapshotPiece& piece) {
  return static_cast<size_t>(piece.box.numel() * dtype_element_size(piece.dtype));
}

char* Snapshot::add(SnapshotPiece piece) {
  const size_t n = snapshot_piece_bytes(piece);
  // Offsets rounded to 64 bytes keep every piece aligned for its dtype and for vector copies.
  piece.offset = (size_ + 63) / 64 * 64;
  size_ = piece.offset + n;
  if (bytes_.size() < size_) bytes_.resize(size_ + size_ / 4);  // headroom: later snapshots rarely regrow
  pieces_.push_back(std::move(piece));
  return bytes_.data() + pieces_.back().offset;
}

}  // namespace cadre
