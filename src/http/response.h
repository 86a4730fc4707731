// The answer to one request, written straight to the connection: whole (Content-Length) or as
// a stream of chunks, each write bounded by the send deadline. A write that fails (the client
// left, or stopped reading for longer than the deadline) marks the connection broken, and the
// handler learns it from the return value, so it can cancel the work behind the answer.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cadre::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

const char* status_reason(int status);

class Response {
 public:
  Response(int fd, bool head_only, bool keep_alive, bool chunked_ok, double send_timeout_s)
      : fd_(fd), head_only_(head_only), keep_alive_(keep_alive), chunked_ok_(chunked_ok), send_timeout_s_(send_timeout_s) {}

  // The whole answer; false when it could not be written.
  bool send(int status, std::string_view content_type, std::string_view body, const Headers& extra = {});
  // A streamed answer: the head now, then chunks, then the end.
  bool begin_stream(int status, std::string_view content_type, const Headers& extra = {});
  bool write(std::string_view data);
  bool end_stream();

  // Whether the client closed its connection while the answer was being prepared.
  bool client_gone() const;
  bool started() const { return started_; }
  bool broken() const { return broken_; }
  // Whether the connection serves another request after this answer.
  bool keep_alive() const { return keep_alive_ && !broken_ && (!streaming_ || ended_); }
  // The connection closes after this answer whatever the request asked (an error, a drain).
  void close_after() { keep_alive_ = false; }
  // No answer: the client is gone. The connection closes without one.
  void abandon() { abandoned_ = true; keep_alive_ = false; }
  bool abandoned() const { return abandoned_; }
  int status() const { return status_; }

 private:
  std::string head(int status, std::string_view content_type, const Headers& extra, const std::string& framing) const;
  bool put(std::string_view data);

  int fd_;
  bool head_only_, keep_alive_, chunked_ok_;
  double send_timeout_s_;
  bool started_ = false, streaming_ = false, ended_ = false, broken_ = false, abandoned_ = false;
  int status_ = 0;
};

}  // namespace cadre::http
