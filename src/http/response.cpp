// Response heads, Content-Length and chunked framing (see response.h).
#include "http/response.h"

#include <cstdio>

#include "http/socket_io.h"

namespace cadre::http {

const char* status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string Response::head(int status, std::string_view content_type, const Headers& extra,
                           const std::string& framing) const {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + status_reason(status) + "\r\n";
  if (!content_type.empty()) h.append("Content-Type: ").append(content_type).append("\r\n");
  for (const auto& [name, value] : extra) h.append(name).append(": ").append(value).append("\r\n");
  h += framing;
  h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  h += "\r\n";
  return h;
}

bool Response::put(std::string_view data) {
  if (broken_) return false;
  if (!send_all(fd_, data, after(send_timeout_s_))) broken_ = true;
  return !broken_;
}

bool Response::send(int status, std::string_view content_type, std::string_view body, const Headers& extra) {
  if (started_) return false;
  started_ = true;
  status_ = status;
  std::string text = head(status, content_type, extra, "Content-Length: " + std::to_string(body.size()) + "\r\n");
  if (!head_only_) text.append(body);
  return put(text);
}

bool Response::begin_stream(int status, std::string_view content_type, const Headers& extra) {
  if (started_) return false;
  started_ = streaming_ = true;
  status_ = status;
  // An HTTP/1.0 client cannot read chunks: its stream ends when the connection closes.
  if (!chunked_ok_) keep_alive_ = false;
  return put(head(status, content_type, extra, chunked_ok_ ? "Transfer-Encoding: chunked\r\n" : ""));
}

bool Response::write(std::string_view data) {
  if (!streaming_ || ended_ || data.empty() || head_only_) return !broken_;
  if (!chunked_ok_) return put(data);
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string chunk(size);
  chunk.append(data).append("\r\n");
  return put(chunk);
}

bool Response::end_stream() {
  if (!streaming_ || ended_) return !broken_;
  ended_ = true;
  if (!chunked_ok_ || head_only_) return !broken_;
  return put("0\r\n\r\n");
}

bool Response::client_gone() const { return broken_ || peer_closed(fd_); }

}  // namespace cadre::http
