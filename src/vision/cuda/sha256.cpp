#include "vision/cuda/sha256.h"

#include <openssl/evp.h>

#include "vision/core/error.h"

namespace vision::cuda {

Sha256Digest sha256(std::string_view data) {
  Sha256Digest out{};
  unsigned int size = 0;
  VISION_CHECK(EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr) == 1 && size == 32,
               "OpenSSL EVP_Digest(sha256) failed");
  return out;
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    s[2 * i] = kHex[digest[i] >> 4];
    s[2 * i + 1] = kHex[digest[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

}  // namespace vision::cuda
