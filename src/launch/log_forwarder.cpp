// Worker output forwarding (see log_forwarder.h).
#include "launch/log_forwarder.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace cadre::launch {
namespace {
void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console gone (closed pipe): keep forwarding to the files
    done += static_cast<size_t>(n);
  }
}
}  // namespace

LogForwarder::LogForwarder(std::vector<LogStream> streams) {
  for (auto& spec : streams) {
    Stream s;
    s.file_fd = ::open(spec.file_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    CADRE_CHECK(s.file_fd >= 0, "cannot open worker log ", spec.file_path, ": ", std::strerror(errno));
    s.spec = std::move(spec);
    streams_.push_back(std::move(s));
  }
  thread_ = std::thread([this] { run(); });
}

LogForwarder::~LogForwarder() {
  stop();
  for (auto& s : streams_) {
    if (s.spec.pipe_fd >= 0) ::close(s.spec.pipe_fd);
    if (s.file_fd >= 0) ::close(s.file_fd);
  }
}

void LogForwarder::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> LogForwarder::tail(size_t stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto& t = streams_.at(stream).tail;
  return {t.begin(), t.end()};
}

void LogForwarder::emit_line(Stream& s, const std::string& line) {
  write_all(s.file_fd, line + "\n");
  write_all(s.spec.console_fd, s.spec.prefix + line + "\n");  // one write: lines stay whole
  std::lock_guard<std::mutex> lock(mutex_);
  s.tail.push_back(line);
  if (s.tail.size() > kTailLines) s.tail.pop_front();
}

void LogForwarder::run() {
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    for (auto& s : streams_)
      if (s.spec.pipe_fd >= 0) {
        fds.push_back({s.spec.pipe_fd, POLLIN, 0});
        owners.push_back(&s);
      }
    if (fds.empty()) break;
    bool stopping = stopping_.load();
    // Once stopping, only drain what is already there: a stray process holding a pipe open
    // must not keep the agent waiting.
    int ready = ::poll(fds.data(), fds.size(), stopping ? 0 : 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (stopping) break;
      continue;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = *owners[i];
      ssize_t n = ::read(s.spec.pipe_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(s.spec.pipe_fd);
        s.spec.pipe_fd = -1;
        continue;
      }
      for (const std::string& line : s.lines.append(buf, static_cast<size_t>(n))) emit_line(s, line);
    }
  }
  for (auto& s : streams_) {
    std::string rest = s.lines.take_rest();
    if (!rest.empty()) emit_line(s, rest);
  }
}

}  // namespace cadre::launch
