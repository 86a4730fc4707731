// SHA-256 of a tokenizer file (OpenSSL's libcrypto).
#include "data/tokenizer_identity.h"

#include <openssl/evp.h>

#include "core/error.h"
#include "core/file_util.h"

namespace cadre {

std::string tokenizer_identity(const std::string& path) {
  const std::string bytes = file_read(path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  CADRE_CHECK(EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1 && length == 32,
              "SHA-256 of tokenizer '", path, "' failed");
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

}  // namespace cadre
