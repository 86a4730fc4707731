// What every fuzz target asserts: a parser given any bytes either succeeds or throws its own
// error type (cadre::Error and its subclasses: ConfigError, CheckpointError, ...). Anything
// else escaping (a JSON or YAML library exception, std::out_of_range, bad_alloc) terminates
// the process, and libFuzzer reports it like a crash; so do the sanitizers' findings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace cadre::fuzz {

template <typename Fn>
void only_cadre_errors(Fn&& fn) {
  try {
    fn();
  } catch (const cadre::Error&) {
    // the reader's own error: the expected answer to bad input
  }
}

// A property the parser promised that the fuzzer found broken.
[[noreturn]] inline void violated(const char* what) {
  __builtin_fprintf(stderr, "fuzz: invariant violated: %s\n", what);
  std::abort();
}

inline std::string text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

}  // namespace cadre::fuzz
