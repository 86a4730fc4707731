// The HTTP request parser on its own: framing (Content-Length, chunked, pipelined requests),
// every split of the input giving the same request, and each refusal with its status, the body
// limit holding for chunked bodies before the bytes past it are taken.
#include "http/request_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace cadre::http {
namespace {

ParserLimits small_limits() {
  ParserLimits l;
  l.max_header_bytes = 512;
  l.max_header_fields = 8;
  l.max_body_bytes = 64;
  return l;
}

// Feeds `text` in pieces of `step` bytes; returns the parser and the bytes it used.
RequestParser parse(const std::string& text, size_t step = 0, size_t* used = nullptr, ParserLimits l = small_limits()) {
  RequestParser p(l);
  size_t pos = 0;
  if (step == 0) step = text.size() + 1;
  while (pos < text.size() && (p.state() == RequestParser::State::Head || p.state() == RequestParser::State::Body))
    pos += p.feed(std::string_view(text).substr(pos, step));
  if (used) *used = pos;
  return p;
}

int status_of(const std::string& text) {
  RequestParser p = parse(text);
  EXPECT_EQ(p.state(), RequestParser::State::Failed) << text;
  return p.error_status();
}

TEST(RequestParser, ContentLengthBodyInAnySplit) {
  const std::string text =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nX-Empty:\r\n\r\nhello world";
  for (size_t step : {0, 1, 2, 3, 7, 50}) {
    size_t used = 0;
    RequestParser p = parse(text, step, &used);
    ASSERT_EQ(p.state(), RequestParser::State::Complete) << "step " << step;
    EXPECT_EQ(used, text.size());
    const Request& r = p.request();
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.path, "/v1/completions");
    EXPECT_EQ(r.query, "x=1");
    EXPECT_EQ(r.body, "hello world");
    EXPECT_EQ(r.header("host"), "a");
    EXPECT_TRUE(r.has_header("x-empty"));
    EXPECT_TRUE(r.keep_alive());
  }
}

TEST(RequestParser, ChunkedBodyWithExtensionsAndTrailerInAnySplit) {
  const std::string text =
      "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n";
  for (size_t step : {0, 1, 2, 5, 13}) {
    size_t used = 0;
    RequestParser p = parse(text, step, &used);
    ASSERT_EQ(p.state(), RequestParser::State::Complete) << "step " << step << ": " << p.error_message();
    EXPECT_EQ(used, text.size());
    EXPECT_EQ(p.request().body, "hello 0123456789");
  }
}

TEST(RequestParser, PipelinedRequestsStopAtTheEndOfEach) {
  const std::string first = "GET /a HTTP/1.1\r\n\r\n", second = "POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nok";
  const std::string both = first + second;
  RequestParser p(small_limits());
  const size_t used = p.feed(both);
  ASSERT_EQ(p.state(), RequestParser::State::Complete);
  EXPECT_EQ(used, first.size());
  EXPECT_EQ(p.take_request().path, "/a");
  EXPECT_EQ(p.state(), RequestParser::State::Head);
  EXPECT_EQ(p.feed(std::string_view(both).substr(used)), second.size());
  ASSERT_EQ(p.state(), RequestParser::State::Complete);
  EXPECT_EQ(p.request().body, "ok");
}

TEST(RequestParser, KeepAliveFollowsVersionAndConnection) {
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").request().keep_alive());
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request().keep_alive());
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").request().keep_alive());
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nConnection: upgrade, keep-alive\r\n\r\n").request().keep_alive());
}

TEST(RequestParser, PercentEscapesInThePathAreDecoded) {
  EXPECT_EQ(parse("GET /v1/models/org%2Fm%20x HTTP/1.1\r\n\r\n").request().path, "/v1/models/org/m x");
  EXPECT_EQ(status_of("GET /a%2 HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /a%zz HTTP/1.1\r\n\r\n"), 400);
}

TEST(RequestParser, ExpectContinueIsSeenOnceTheHeadIsIn) {
  RequestParser p(small_limits());
  p.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_TRUE(p.head_done());
  EXPECT_TRUE(p.expects_continue());
  EXPECT_EQ(p.state(), RequestParser::State::Body);
}

TEST(RequestParser, BodiesOverTheLimitAre413BeforeTheirBytesAreTaken) {
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n"), 413);
  // A chunk announcing more than the limit fails on its size line.
  std::string big = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n" + std::string(65, 'x') + "\r\n0\r\n\r\n";
  size_t used = 0;
  RequestParser p = parse(big, 1, &used);
  EXPECT_EQ(p.error_status(), 413);
  EXPECT_EQ(big.substr(used, 65), std::string(65, 'x')) << "the oversized chunk's data was taken";
  // Many small chunks: refused on the chunk that crosses the limit, with at most the limit taken.
  std::string many = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 100; ++i) many += "8\r\n12345678\r\n";
  RequestParser q = parse(many, 3, &used);
  EXPECT_EQ(q.error_status(), 413);
  EXPECT_LE(q.request().body.size(), 64u);
  EXPECT_LT(used, many.size() / 4);
}

TEST(RequestParser, HeadsOverTheLimitAre431Or414) {
  EXPECT_EQ(status_of("GET /" + std::string(600, 'a') + " HTTP/1.1\r\n\r\n"), 414);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX-Big: " + std::string(600, 'a') + "\r\n\r\n"), 431);
  std::string fields = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 9; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(fields + "\r\n"), 431);
  // An endless head is refused once the limit is passed, whatever the split.
  size_t used = 0;
  RequestParser p = parse("GET / HTTP/1.1\r\nX: " + std::string(5000, 'a'), 7, &used);
  EXPECT_EQ(p.error_status(), 431);
  EXPECT_LE(used, 512u + 7u);
}

TEST(RequestParser, MalformedRequestsAre400) {
  for (const std::string& bad : {
           std::string("\x16\x03\x01\x02\x01garbage\r\n\r\n"),        // a TLS hello
           std::string("GET /\r\n\r\n"),                               // no version
           std::string("GET  / HTTP/1.1\r\n\r\n"),                     // two spaces
           std::string("GET / HTTP/1.1\r\nBad Name: v\r\n\r\n"),       // space in a name
           std::string("GET / HTTP/1.1\r\nNoColon\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"),   // obsolete folding
           std::string("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"),          // control character
           std::string("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
           std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"),
           std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1234567890123456\r\n"),
       })
    EXPECT_EQ(status_of(bad), 400) << bad;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nExpect: tea\r\n\r\n"), 417);
}

TEST(RequestParser, LeadingEmptyLinesAreSkipped) {
  RequestParser p = parse("\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
  ASSERT_EQ(p.state(), RequestParser::State::Complete);
  EXPECT_EQ(p.request().path, "/x");
}

}  // namespace
}  // namespace cadre::http
