// A rank's staged checkpoint data: copies of the slices it writes (model shard, optimizer
// moments, RNG state), packed in one reusable buffer so training can go on changing the
// originals while a background thread writes the copy; or, where nothing will change them
// before the write ends (a run's last checkpoint), the slices themselves, borrowed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/box.h"

namespace cadre {

struct SnapshotPiece {
  std::string tensor;           // full name, e.g. "model.layers.0.attention.wq.weight"
  std::string dtype;            // "float32", "uint8", ...
  std::vector<int64_t> shape;   // global shape of the tensor
  Box box;                      // which elements (row-major inside the box)
  size_t offset = 0;            // where the bytes are in Snapshot::bytes
  const char* borrowed = nullptr;  // or where they are outside it (Snapshot::add_borrowed)
};

class Snapshot {
 public:
  void clear() {
    pieces_.clear();
    size_ = 0;
    fills_.clear();
  }
  // Makes room for pieces of these sizes in one allocation before they are added. Added one by
  // one, a large snapshot regrows the buffer many times, and each regrow holds the old copy and
  // the new one at once: a save's peak was ~2.25x its snapshot.
  void reserve(const std::vector<size_t>& piece_bytes);
  // Reserves room for a piece and returns where its bytes go (valid until the next add()).
  char* add(SnapshotPiece piece);
  // Records a piece without copying it: its bytes stay at `bytes`, which must neither change
  // nor go away until the snapshot has been written.
  void add_borrowed(SnapshotPiece piece, const char* bytes);
  const std::vector<SnapshotPiece>& pieces() const { return pieces_; }
  const char* data(const SnapshotPiece& p) const { return p.borrowed ? p.borrowed : bytes_.data() + p.offset; }
  // Where a copied piece's bytes go (not for a borrowed piece).
  char* data(const SnapshotPiece& p) { return bytes_.data() + p.offset; }
  // Work that must be done before the staged bytes are read: copies from a device still in
  // flight when staging returned are waited for by the writer, not the training thread.
  void defer(std::function<void(Snapshot&)> fill) { fills_.push_back(std::move(fill)); }
  // Runs the deferred fills in order, dropping them even when one throws; the writer calls it
  // before reading. clear() drops any not run.
  void finish();
  size_t size() const { return size_; }       // bytes copied in (borrowed pieces not counted)
  size_t capacity() const { return bytes_.size(); }
  // Hands the buffer's whole pages back to the kernel once the staged bytes are written, keeping
  // the allocation: a training process must not hold a checkpoint-sized copy between saves.
  // The next snapshot faults them in again (as zeros). The staged bytes are gone after this.
  void release_pages();

 private:
  std::vector<SnapshotPiece> pieces_;
  std::vector<char> bytes_;  // grows once to the largest snapshot; its address range is reused
  size_t size_ = 0;
  std::vector<std::function<void(Snapshot&)>> fills_;
};

size_t snapshot_piece_bytes(const SnapshotPiece& piece);

}  // namespace cadre
