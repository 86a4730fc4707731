// Job secret sources and hand-over (see secret.h).
#include "store/secret.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/log.h"
#include "store/auth.h"

namespace cadre::store {
namespace {

constexpr size_t kMinSecret = 16, kMaxSecret = 4096;

// Up to kMaxSecret + 1 bytes from the start of `fd` (pread: the offset is shared by every
// process that inherited the descriptor, and each must read it whole).
std::string read_fd(int fd, const std::string& source) {
  std::string out(kMaxSecret + 1, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t r = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw ConfigError(str(source, ": cannot read the job secret: ", std::strerror(errno)));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

}  // namespace

std::string job_secret_generate() {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : random_bytes(32)) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string job_secret_check(std::string text, const std::string& source) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  CADRE_CONFIG_CHECK(text.size() >= kMinSecret && text.size() <= kMaxSecret, source, ": the job secret must be ",
                     kMinSecret, " to ", kMaxSecret, " bytes, got ", text.size(),
                     " (make one with `openssl rand -hex 32`)");
  return text;
}

std::string job_secret_read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CADRE_CONFIG_CHECK(fd >= 0, "job secret file '", path, "': ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)))
    log::warn(str("job secret file '", path, "' may be read by other users (mode ", std::oct, (st.st_mode & 0777),
                  "); chmod 600 it"));
  std::string text;
  try {
    text = read_fd(fd, "job secret file '" + path + "'");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return job_secret_check(text, "job secret file '" + path + "'");
}

namespace {

std::optional<std::string> secret_from_variables() {
  if (const char* fd_text = std::getenv(kSecretFdEnv); fd_text && *fd_text) {
    char* end = nullptr;
    long fd = std::strtol(fd_text, &end, 10);
    CADRE_CONFIG_CHECK(end && *end == 0 && fd >= 0 && fd < (1 << 20), kSecretFdEnv, "='", fd_text,
                       "' is not a file descriptor");
    const std::string source = str(kSecretFdEnv, "=", fd);
    std::string secret = job_secret_check(read_fd(static_cast<int>(fd), source), source);
    // Read once, the descriptor is not passed on: programs this process starts do not get it.
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return secret;
  }
  if (const char* path = std::getenv(kSecretFileEnv); path && *path) return job_secret_read_file(path);
  if (const char* value = std::getenv(kSecretEnv); value && *value) return job_secret_check(value, kSecretEnv);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> job_secret_from_environment() {
  static std::mutex mu;
  static std::optional<std::string> taken;
  std::lock_guard<std::mutex> lock(mu);
  if (taken) return taken;
  taken = secret_from_variables();
  if (taken)
    for (const char* name : {kSecretEnv, kSecretFileEnv, kSecretFdEnv}) ::unsetenv(name);
  return taken;
}

int job_secret_fd_create(const std::string& secret) {
  int fd = ::memfd_create("cadre-job-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CADRE_CHECK(fd >= 0, "memfd_create for the job secret: ", std::strerror(errno));
  size_t done = 0;
  while (done < secret.size()) {
    ssize_t w = ::write(fd, secret.data() + done, secret.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(str("writing the job secret to its memfd: ", std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  // Workers may read it, never change it for the others. They share this descriptor's offset:
  // readers other than pread should open /proc/self/fd/N, which starts at 0 for each.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(str("sealing the job secret's memfd (workers could change it for each other): ", std::strerror(err)));
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

}  // namespace cadre::store
