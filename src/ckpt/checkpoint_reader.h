// Reads a committed sharded checkpoint: any box of any tensor (or any range of a box's
// elements), from whichever rank files hold it, so a job of another size, strategy or
// tensor-parallel layout loads only its own part (no rank ever assembles the whole model).
// Every block read is checked against its CRC-32C.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ckpt/manifest.h"

namespace cadre {

// The libtorch dtype of a manifest's dtype name (bytes for a name it does not know).
at::ScalarType checkpoint_scalar_type(const std::string& dtype);

class CheckpointReader {
 public:
  // Opens <dir>: COMMITTED and manifest.json must exist, every rank file must be there with
  // its recorded size. CheckpointError naming the directory and file otherwise.
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointManifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  bool has(const std::string& tensor) const { return manifest_.tensors.count(tensor) > 0; }
  const TensorRecord& tensor(const std::string& name) const;  // CheckpointError if absent

  // Copies elements [start, start + count) of `box` (its row-major order) into `out` (count
  // elements of the tensor's dtype). Of each stored piece overlapping them, the checksum blocks
  // holding them are read and verified (the whole piece in checkpoints written before blocks);
  // CheckpointError names the tensor, file and byte range on a mismatch.
  void read(const std::string& tensor, const Box& box, int64_t start, int64_t count, void* out) const;
  void read(const std::string& tensor, const Box& box, void* out) const { read(tensor, box, 0, box.numel(), out); }
  // Elements [start, start + count) of the flattened tensor.
  void read(const std::string& tensor, int64_t start, int64_t count, void* out) const;

  // The whole tensor, assembled (for export and tools, not for training: a training rank
  // reads only its slices).
  at::Tensor read_tensor(const std::string& tensor) const;

  // Reads every piece of every tensor and checks its checksum. Returns one line per problem
  // (empty: the checkpoint is intact). `bytes_read` receives the bytes checked.
  std::vector<std::string> verify(int64_t* bytes_read = nullptr) const;

  // Bytes read from the rank files so far, and their total size: how much of the checkpoint
  // this process touched.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_total() const;

 private:
  struct Copy {
    int64_t to = 0, from = 0, count = 0;
  };
  void open_files();
  // A piece's checksum blocks [first, last] read into `buf` and checked (one block, the whole
  // piece, where it has no block checksums). Returns the bytes' position in the piece.
  int64_t read_blocks(const std::string& tensor, const TensorRecord& t, const PieceRecord& p, int64_t first,
                      int64_t last, std::vector<char>& buf) const;
  // Copies `copies` (element positions: `to` in the wanted region, `from` in the piece) out of
  // piece `p`, reading only the blocks they touch. Returns the elements copied.
  int64_t copy_from_piece(const std::string& tensor, const TensorRecord& t, const PieceRecord& p,
                          std::vector<Copy>& copies, int64_t start, char* out) const;
  // The bytes of a checksum block of `p` (the whole piece when it has no block checksums).
  int64_t block_bytes(const TensorRecord& t, const PieceRecord& p) const;
  // Fills `out` with elements [start, start + count) of the wanted region, whose runs
  // (positions in the region's own order) are `wanted`.
  void read_runs(const std::string& tensor, const TensorRecord& t, const std::vector<Run>& wanted, int64_t start,
                 int64_t count, void* out) const;

  std::string dir_;
  CheckpointManifest manifest_;
  std::vector<int> fds_;  // one per manifest file
  mutable std::atomic<int64_t> bytes_read_{0};
};

}  // namespace cadre
