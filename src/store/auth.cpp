// HMAC proofs and nonces for the store handshake (see auth.h), over OpenSSL's libcrypto.
#include "store/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace cadre::store {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::getrandom(out.data() + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    CADRE_CHECK(r > 0, "getrandom: ", std::strerror(errno));
    done += static_cast<size_t>(r);
  }
  return out;
}

std::string auth_proof(const std::string& secret, Role role, const std::string& first_nonce,
                       const std::string& second_nonce) {
  std::string message = role == Role::Client ? "cadre-store-v1 client" : "cadre-store-v1 server";
  message += '\0';
  message += first_nonce;
  message += second_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const unsigned char* ok = ::HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  CADRE_CHECK(ok && len == 32, "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool proofs_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cadre::store
