// SHA-256 digests (OpenSSL's libcrypto EVP API) — the keys and checksums of the kernel cache.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace vision::cuda {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
// Lower-case hex of sha256(data): 64 characters.
std::string sha256_hex(std::string_view data);
std::string to_hex(const Sha256Digest& digest);

}  // namespace vision::cuda
