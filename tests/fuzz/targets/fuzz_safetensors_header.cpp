// safetensors headers: the 8-byte length, the JSON, dtypes, shapes and data offsets with
// overflow. Every accepted tensor must lie inside the file and match its shape's size.
#include "ckpt/safetensors_header.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = cadre::fuzz::text(data, size);
  cadre::fuzz::only_cadre_errors([&] {
    for (const auto& e : cadre::safetensors_parse_header(file, "fuzz.safetensors")) {
      if (e.begin > e.end || e.end > file.size()) cadre::fuzz::violated("a tensor outside the file was accepted");
      __int128 bytes = cadre::safetensors_element_size(e.dtype);
      for (int64_t d : e.shape) {
        if (d < 0) cadre::fuzz::violated("a negative dimension was accepted");
        bytes *= d;
      }
      if (bytes != static_cast<__int128>(e.end - e.begin)) cadre::fuzz::violated("a size that disagrees with the shape");
    }
  });
  return 0;
}
