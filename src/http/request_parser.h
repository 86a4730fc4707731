// An incremental HTTP/1.x request parser: bytes go in as they arrive from the socket, in any
// split; it stops at the end of one request (what follows is the next, pipelined one) or at the
// first error, which carries the status to answer: 400 malformed, 413 body over the limit
// (Content-Length or chunked: counted as the chunks arrive, so an endless chunked body is
// refused at the limit, never buffered), 414 request line too long, 431 header section too
// large or too many fields, 501 a transfer coding other than chunked, 505 not HTTP/1.x.
// No I/O and no allocation beyond the limits: the fuzz target drives it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/request.h"

namespace cadre::http {

struct ParserLimits {
  size_t max_header_bytes = 32 * 1024;  // request line and fields together (and the trailer)
  size_t max_header_fields = 100;
  int64_t max_body_bytes = int64_t{1} << 20;
};

class RequestParser {
 public:
  enum class State { Head, Body, Complete, Failed };

  explicit RequestParser(ParserLimits limits) : limits_(limits) {}

  // Takes bytes of `data` and returns how many it used: all of them unless the request ended
  // (Complete) or failed (Failed) inside `data`.
  size_t feed(std::string_view data);
  State state() const { return state_; }
  bool started() const { return started_; }        // a byte of this request arrived
  bool head_done() const { return state_ == State::Body || state_ == State::Complete; }
  bool expects_continue() const { return expect_continue_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  const Request& request() const { return request_; }
  Request take_request();  // after Complete; the parser is then ready for the next request

 private:
  enum class BodyPart { Length, ChunkSize, ChunkData, ChunkEnd, Trailer };

  size_t feed_head(std::string_view data);
  size_t feed_body(std::string_view data);
  size_t feed_line(std::string_view data, size_t max_line, bool* line_done);
  void parse_head();
  void parse_request_line(std::string_view line);
  void parse_field(std::string_view line);
  void choose_framing();
  void on_chunk_size_line();
  void on_trailer_line();
  void fail(int status, std::string message);
  void complete() { state_ = State::Complete; }

  ParserLimits limits_;
  State state_ = State::Head;
  bool started_ = false;
  bool expect_continue_ = false;
  int error_status_ = 0;
  std::string error_message_;
  std::string head_;  // the header section as it arrives
  std::string line_;  // a chunk-size, chunk-end or trailer line as it arrives
  BodyPart part_ = BodyPart::Length;
  int64_t remaining_ = 0;  // body bytes (Length) or chunk bytes (ChunkData) still to come
  size_t trailer_bytes_ = 0;
  Request request_;
};

}  // namespace cadre::http
