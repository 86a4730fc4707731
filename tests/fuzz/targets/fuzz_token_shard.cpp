// Token shard files: header checks (magic, version, width, the count's byte size with
// overflow) and bounds-checked reads, on any bytes.
#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "data/token_shard.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ShardReader memory-maps a path: each input becomes this process's scratch file.
  static const std::string path = "/dev/shm/cadre-fuzz-shard-" + std::to_string(::getpid()) + ".bin";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  cadre::fuzz::only_cadre_errors([&] {
    cadre::ShardReader reader(path, /*verify=*/true);
    const uint64_t n = reader.size();
    if (static_cast<uint64_t>(size) != 64 + n * reader.token_bytes()) cadre::fuzz::violated("size accepted that the header does not describe");
    std::vector<int64_t> out(std::min<uint64_t>(n, 256));
    reader.read(0, out.size(), out.data());
    for (uint64_t i = 0; i < out.size(); ++i)
      if (static_cast<int64_t>(reader.token(i)) != out[i]) cadre::fuzz::violated("token() and read() disagree");
    try {
      reader.token(n);
      cadre::fuzz::violated("token() past the end did not throw");
    } catch (const cadre::Error&) {
    }
  });
  return 0;
}
