// Deadline-bounded I/O on non-blocking sockets, for the HTTP server: every wait is a poll()
// with a deadline, so no peer can hold a thread longer than the limit it is under.
#pragma once

#include <chrono>
#include <cstddef>
#include <string_view>

namespace cadre::http {

using Clock = std::chrono::steady_clock;

enum class Wait { Ready, Timeout, Stopped };

// Waits until `fd` is readable (data, EOF or an error to collect), `stop_fd` is readable, or
// the deadline passes.
Wait wait_readable(int fd, int stop_fd, Clock::time_point deadline);
// Writes all of `data`, waiting for room in the send buffer until the deadline; false when the
// peer is gone or stopped reading past the deadline.
bool send_all(int fd, std::string_view data, Clock::time_point deadline);
// Whether the peer closed (EOF or a reset) while the server was busy with its request: data
// it sent meanwhile (a pipelined request) is left unread.
bool peer_closed(int fd);
// Sends FIN, then reads and drops what the peer still sends, for up to `seconds` or `max_bytes`,
// before closing: closing with unread data would send a reset, and a reset can destroy the
// answer before the peer has read it.
void lingering_close(int fd, double seconds, size_t max_bytes);
void set_nonblocking(int fd);
Clock::time_point after(double seconds);

}  // namespace cadre::http
