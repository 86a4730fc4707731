// Error types and check macros: every error carries where it was raised and what it concerns.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace cadre {

// Concatenates anything streamable into one string: str("rank ", r, " file ", path).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// A failure at run time (I/O, peers, numerics). Exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input detected before any work starts: config keys, flags, files. Exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  throw Error(str(what, " [", file, ":", line, "]"));
}
}  // namespace detail

}  // namespace cadre

// CADRE_CHECK(cond, "message ", parts...) throws cadre::Error naming the source location.
#define CADRE_CHECK(cond, ...)                                      \
  do {                                                              \
    if (!(cond)) ::cadre::detail::fail(__FILE__, __LINE__, ::cadre::str(__VA_ARGS__)); \
  } while (0)

// Raised for user input problems; the CLI turns it into exit code 2.
#define CADRE_CONFIG_CHECK(cond, ...)                         \
  do {                                                        \
    if (!(cond)) throw ::cadre::ConfigError(::cadre::str(__VA_ARGS__)); \
  } while (0)
