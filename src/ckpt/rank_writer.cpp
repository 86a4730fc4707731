// A rank's shard file and index, written with plain POSIX calls so every failure has its errno.
#include "ckpt/rank_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/file_util.h"

namespace cadre {
namespace {

class OutFile {
 public:
  OutFile(std::string path, int64_t rank) : path_(std::move(path)), rank_(rank) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("cannot write");
      if (w == 0) fail("wrote nothing to");
      p += w;
      n -= static_cast<size_t>(w);
      written_ += w;
    }
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) fail("cannot fsync");
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close");  // NFS reports deferred write errors here
  }
  int64_t written() const { return written_; }

 private:
  [[noreturn]] void fail(const char* what) {
    throw Error(str("checkpoint rank ", rank_, ": ", what, " '", path_, "': ", std::strerror(errno)));
  }
  std::string path_;
  int64_t rank_;
  int fd_ = -1;
  int64_t written_ = 0;
};

}  // namespace

CheckpointManifest rank_write(const std::string& dir, int64_t rank, const Snapshot& snapshot,
                              const CheckpointManifest& header) {
  CheckpointManifest index = header;
  index.files.clear();
  index.tensors.clear();
  const std::string name = checkpoint_rank_file(rank, header.world_size);
  OutFile out(dir + "/" + name, rank);
  for (const SnapshotPiece& p : snapshot.pieces()) {
    const size_t n = snapshot_piece_bytes(p);
    PieceRecord record{0, out.written(), p.box, /*flat=*/false, crc32c(snapshot.data(p), n)};
    out.write(snapshot.data(p), n);
    auto [it, fresh] = index.tensors.emplace(p.tensor, TensorRecord{p.dtype, p.shape, {}});
    CADRE_CHECK(it->second.dtype == p.dtype && it->second.shape == p.shape, "checkpoint rank ", rank, ": tensor '",
                p.tensor, "' staged with two different dtypes or shapes");
    it->second.pieces.push_back(record);
  }
  out.sync_and_close();
  index.files.push_back({name, out.written(), rank});
  try {
    file_write_atomic(dir + "/" + checkpoint_rank_index(rank), manifest_to_json(index));
  } catch (const Error& e) {
    throw Error(str("checkpoint rank ", rank, ": ", e.what()));
  }
  return index;
}

}  // namespace cadre
