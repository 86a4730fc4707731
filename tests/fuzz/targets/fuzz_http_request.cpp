// HTTP requests as `cadre serve` reads them from a socket: any bytes, fed whole and fed in
// pieces of a size taken from the input. Both must reach the same end (the same request, or
// the same error status), a body never exceeds its limit, and pipelined requests are parsed
// one after another until the bytes run out.
#include <algorithm>

#include "fuzz_target.h"
#include "http/request_parser.h"

using cadre::http::ParserLimits;
using cadre::http::Request;
using cadre::http::RequestParser;

namespace {

struct Outcome {
  std::vector<std::string> requests;  // method, target, body of each complete one
  int error = 0;
};

Outcome run(std::string_view input, size_t step, const ParserLimits& limits) {
  Outcome out;
  RequestParser p(limits);
  size_t pos = 0;
  while (pos < input.size()) {
    const size_t used = p.feed(input.substr(pos, std::min(step, input.size() - pos)));
    pos += used;
    if (p.state() == RequestParser::State::Failed) {
      out.error = p.error_status();
      return out;
    }
    if (p.state() == RequestParser::State::Complete) {
      const Request r = p.take_request();
      if (static_cast<int64_t>(r.body.size()) > limits.max_body_bytes) cadre::fuzz::violated("a body over the limit");
      if (r.headers.size() > limits.max_header_fields) cadre::fuzz::violated("more header fields than the limit");
      out.requests.push_back(r.method + " " + r.target + " " + r.body);
    } else if (used == 0) {
      cadre::fuzz::violated("the parser took no byte while waiting for more");
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 17;
  const std::string input = cadre::fuzz::text(data + 1, size - 1);
  ParserLimits limits;
  limits.max_header_bytes = 256;
  limits.max_header_fields = 8;
  limits.max_body_bytes = 128;
  const Outcome whole = run(input, input.size() + 1, limits), pieces = run(input, step, limits);
  if (whole.error != pieces.error || whole.requests != pieces.requests)
    cadre::fuzz::violated("feeding the bytes in pieces changed the outcome");
  return 0;
}
