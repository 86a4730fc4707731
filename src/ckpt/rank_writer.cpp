// A rank's shard file and index, written with plain POSIX calls so every failure has its errno.
#include "ckpt/rank_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/file_util.h"

namespace cadre {

class RankFileWriter::File {
 public:
  File(std::string path, int64_t rank) : path_(std::move(path)), rank_(rank) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~File() {
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

RankFileWriter::RankFileWriter(const std::string& dir, int64_t rank, const CheckpointManifest& header)
    : dir_(dir), rank_(rank), name_(checkpoint_rank_file(rank, header.world_size)), index_(header) {
  index_.files.clear();
  index_.tensors.clear();
  file_ = std::make_unique<File>(dir_ + "/" + name_, rank_);
}

RankFileWriter::~RankFileWriter() = default;

void RankFileWriter::append(const std::string& tensor, const std::string& dtype, const std::vector<int64_t>& shape,
                            const Box& box, const char* bytes) {
  const size_t n = static_cast<size_t>(box.numel() * dtype_element_size(dtype));
  PieceRecord record{0, file_->written(), box, /*flat=*/false, crc32c(bytes, n), {}};
  const int64_t block = index_.checksum_block_bytes;
  const int64_t blocks = checksum_block_count(static_cast<int64_t>(n), block);
  record.block_crc32c.reserve(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, len = std::min<int64_t>(block, static_cast<int64_t>(n) - begin);
    record.block_crc32c.push_back(crc32c(bytes + begin, static_cast<size_t>(len)));
  }
  file_->write(bytes, n);
  auto [it, fresh] = index_.tensors.emplace(tensor, TensorRecord{dtype, shape, {}});
  CADRE_CHECK(it->second.dtype == dtype && it->second.shape == shape, "checkpoint rank ", rank_, ": tensor '", tensor,
              "' written with two different dtypes or shapes");
  it->second.pieces.push_back(record);
}

CheckpointManifest RankFileWriter::finish() {
  file_->sync_and_close();
  index_.files.push_back({name_, file_->written(), rank_});
  try {
    file_write_atomic(dir_ + "/" + checkpoint_rank_index(rank_), manifest_to_json(index_));
  } catch (const Error& e) {
    throw Error(str("checkpoint rank ", rank_, ": ", e.what()));
  }
  return index_;
}

CheckpointManifest rank_write(const std::string& dir, int64_t rank, const Snapshot& snapshot,
                              const CheckpointManifest& header) {
  RankFileWriter writer(dir, rank, header);
  for (const SnapshotPiece& p : snapshot.pieces()) writer.append(p.tensor, p.dtype, p.shape, p.box, snapshot.data(p));
  return writer.finish();
}

}  // namespace cadre
