// The etcd gateway's base64 (rdzv/etcd_answer.h): every byte string round-trips, and texts
// that are not canonical base64 (bad length, characters, padding, non-zero bits after the last
// byte) are refused naming the text, so no two texts decode to the same key.
#include <gtest/gtest.h>

#include "core/error.h"
#include "rdzv/etcd_answer.h"

using namespace cadre::rdzv;

TEST(EtcdBase64, EveryLengthAndByteRoundTrips) {
  std::string bytes;
  for (int n = 0; n < 300; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes) << n << " bytes";
    bytes += char((n * 37 + 11) & 0xff);
  }
  EXPECT_EQ(base64_encode("ab"), "YWI=");  // RFC 4648 alphabet and padding
  EXPECT_EQ(base64_decode("YQ=="), "a");
}

TEST(EtcdBase64, NonCanonicalTextsAreRefused) {
  for (const char* text : {"zdj=", "zR==", "YR==", "YWJ=", "YWI", "YW=I", "Y===", "YW!=", "=YWI"}) {
    try {
      base64_decode(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const cadre::Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
}
