// The request parser's state machine (see request_parser.h). Framing follows RFC 9112: a
// request with both Transfer-Encoding and Content-Length, or with two different lengths, is
// refused (400), since a proxy in front might frame it the other way (request smuggling).
#include "http/request_parser.h"

#include <algorithm>
#include <cctype>

namespace cadre::http {
namespace {

bool is_token_char(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_token_char(static_cast<unsigned char>(c)); });
}

// Visible characters, spaces and tabs, and obs-text (bytes >= 0x80): what a field value may hold.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX sequences decoded; false for a malformed one.
bool percent_decode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// A decimal Content-Length: digits only, no sign, no overflow (-1 when it is not one).
int64_t parse_length(std::string_view s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

constexpr size_t kMaxChunkLine = 1024;  // a chunk size and its extensions

}  // namespace

void RequestParser::fail(int status, std::string message) {
  state_ = State::Failed;
  error_status_ = status;
  error_message_ = std::move(message);
}

Request RequestParser::take_request() {
  Request r = std::move(request_);
  *this = RequestParser(limits_);
  return r;
}

size_t RequestParser::feed(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && (state_ == State::Head || state_ == State::Body)) {
    const std::string_view rest = data.substr(used);
    used += state_ == State::Head ? feed_head(rest) : feed_body(rest);
  }
  return used;
}

size_t RequestParser::feed_head(std::string_view data) {
  size_t used = 0;
  // Empty lines before a request line are skipped (RFC 9112 2.2): some clients send a CRLF
  // after a body.
  while (head_.empty() && used < data.size() && (data[used] == '\r' || data[used] == '\n')) ++used;
  if (used == data.size()) return used;
  started_ = true;
  const size_t old_size = head_.size();
  const size_t room = limits_.max_header_bytes - std::min(limits_.max_header_bytes, old_size);
  const size_t appended = std::min(room + 1, data.size() - used);
  head_.append(data.substr(used, appended));
  // The head ends at the first empty line: "\n\n" once the CRs are ignored.
  size_t end = std::string::npos;
  for (size_t i = old_size >= 2 ? old_size - 2 : 0; i < head_.size(); ++i) {
    if (head_[i] != '\n') continue;
    size_t j = i + 1;
    if (j < head_.size() && head_[j] == '\r') ++j;
    if (j < head_.size() && head_[j] == '\n') {
      end = j + 1;
      break;
    }
  }
  if (end == std::string::npos && head_.size() <= limits_.max_header_bytes) return used + appended;
  if (end == std::string::npos || end > limits_.max_header_bytes) {
    const size_t first_nl = head_.find('\n');
    if (first_nl == std::string::npos || first_nl >= limits_.max_header_bytes)
      fail(414, "the request line is longer than the limit of " + std::to_string(limits_.max_header_bytes) + " bytes");
    else
      fail(431, "the request's header fields exceed the limit of " + std::to_string(limits_.max_header_bytes) + " bytes");
    return used + appended;
  }
  const size_t taken = end - old_size;  // of the bytes appended
  head_.resize(end);
  parse_head();
  return used + taken;
}

void RequestParser::parse_head() {
  std::string_view head(head_);
  size_t pos = 0;
  bool first = true;
  while (state_ == State::Head) {
    const size_t nl = head.find('\n', pos);
    const std::string_view line = strip_cr(head.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.find('\r') != std::string_view::npos) return fail(400, "a bare CR in the request head");
    if (first) {
      parse_request_line(line);
      first = false;
    } else if (line.empty()) {
      choose_framing();
      return;
    } else {
      parse_field(line);
    }
  }
}

void RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not 'METHOD TARGET HTTP/1.x'");
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the request method is not a token");
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
      }))
    return fail(400, "the request target is empty or holds spaces or control characters");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return fail(400, "the request line does not end in a protocol version HTTP/x.y");
  if (version[5] != '1') return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.minor_version = version[7] - '0';
  const size_t q = target.find('?');
  if (!percent_decode(target.substr(0, q), &request_.path))
    return fail(400, "the request path holds a malformed %-escape");
  if (q != std::string_view::npos) request_.query = std::string(target.substr(q + 1));
}

void RequestParser::parse_field(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return fail(400, "a folded header line (obsolete line folding)");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail(400, "a header line without ':'");
  const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
  if (!is_token(name)) return fail(400, "a header name that is empty or holds characters a name cannot");
  if (!is_field_value(value)) return fail(400, "the header '" + std::string(name) + "' holds control characters");
  if (request_.headers.size() >= limits_.max_header_fields)
    return fail(431, "the request has more than " + std::to_string(limits_.max_header_fields) + " header fields");
  request_.headers.emplace_back(std::string(name), std::string(value));
}

void RequestParser::choose_framing() {
  int64_t length = -1;
  bool chunked = false, has_te = false;
  for (const auto& [name, value] : request_.headers) {
    if (equals_ignore_case(name, "Content-Length")) {
      const int64_t n = parse_length(value);
      if (n < 0) return fail(400, "Content-Length '" + value + "' is not a decimal length");
      if (length >= 0 && n != length) return fail(400, "two different Content-Length fields");
      length = n;
    } else if (equals_ignore_case(name, "Transfer-Encoding")) {
      if (has_te || !equals_ignore_case(trim(value), "chunked"))
        return fail(501, "Transfer-Encoding '" + value + "' is not served (only 'chunked')");
      has_te = chunked = true;
    } else if (equals_ignore_case(name, "Expect")) {
      if (!equals_ignore_case(value, "100-continue")) return fail(417, "Expect '" + value + "' cannot be met");
      expect_continue_ = request_.minor_version >= 1;
    }
  }
  if (chunked && length >= 0) return fail(400, "both Transfer-Encoding and Content-Length");
  head_.clear();
  head_.shrink_to_fit();
  if (length > limits_.max_body_bytes) return fail(413, "the request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
  state_ = State::Body;
  if (chunked) {
    part_ = BodyPart::ChunkSize;
  } else {
    part_ = BodyPart::Length;
    remaining_ = std::max<int64_t>(length, 0);
    request_.body.reserve(static_cast<size_t>(remaining_));
    if (remaining_ == 0) complete();
  }
}

// Gathers one line into line_ (at most max_line bytes); *line_done once its '\n' arrived.
size_t RequestParser::feed_line(std::string_view data, size_t max_line, bool* line_done) {
  const size_t nl = data.find('\n');
  const size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
  if (line_.size() + take > max_line) {
    fail(part_ == BodyPart::Trailer ? 431 : 400,
         part_ == BodyPart::Trailer ? "the chunked body's trailer exceeds the header limit"
                                    : "a chunk-size line longer than " + std::to_string(max_line) + " bytes");
    return take;
  }
  line_.append(data.substr(0, take));
  *line_done = nl != std::string_view::npos;
  if (*line_done) {
    line_.pop_back();
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  }
  return take;
}

size_t RequestParser::feed_body(std::string_view data) {
  if (part_ == BodyPart::Length || part_ == BodyPart::ChunkData) {
    const size_t take = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(data.size())));
    request_.body.append(data.substr(0, take));
    remaining_ -= static_cast<int64_t>(take);
    if (remaining_ == 0) {
      if (part_ == BodyPart::Length) complete();
      else part_ = BodyPart::ChunkEnd;
    }
    return take;
  }
  bool done = false;
  const size_t max_line = part_ == BodyPart::Trailer ? limits_.max_header_bytes - std::min(limits_.max_header_bytes, trailer_bytes_) + 2 : kMaxChunkLine;
  const size_t used = feed_line(data, max_line, &done);
  if (!done || state_ == State::Failed) return used;
  if (part_ == BodyPart::ChunkSize) {
    on_chunk_size_line();
  } else if (part_ == BodyPart::ChunkEnd) {
    if (!line_.empty()) fail(400, "chunk data longer than its chunk size");
    part_ = BodyPart::ChunkSize;
  } else {
    on_trailer_line();
  }
  line_.clear();
  return used;
}

void RequestParser::on_chunk_size_line() {
  std::string_view line(line_);
  int64_t size = 0;
  size_t digits = 0;
  for (; digits < line.size() && hex_value(line[digits]) >= 0; ++digits) {
    if (digits == 15) return fail(400, "a chunk size of more than 15 hex digits");
    size = size * 16 + hex_value(line[digits]);
  }
  if (digits == 0) return fail(400, "a chunk does not start with its size in hex");
  const std::string_view rest = trim(line.substr(digits));
  if (!rest.empty() && (rest.front() != ';' || !is_field_value(rest)))
    return fail(400, "a chunk size followed by something other than ';' extensions");
  if (size == 0) {
    part_ = BodyPart::Trailer;
    return;
  }
  if (size > limits_.max_body_bytes - static_cast<int64_t>(request_.body.size()))
    return fail(413, "the request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
  part_ = BodyPart::ChunkData;
  remaining_ = size;
}

void RequestParser::on_trailer_line() {
  if (line_.empty()) return complete();
  trailer_bytes_ += line_.size() + 2;
  // Trailer fields are checked like header fields and then dropped: nothing here reads them.
  if (line_.find(':') == std::string::npos || !is_token(std::string_view(line_).substr(0, line_.find(':'))))
    fail(400, "a malformed trailer field in the chunked body");
}

}  // namespace cadre::http
