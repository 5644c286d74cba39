// The disk image cache's file format (image_cache.h): encode and parse, apart from the cache itself so that the
// fuzz target of this parser (tests/fuzz/fuzz_image_cache_file.cpp) needs nothing else.
#include <algorithm>
#include <cstring>

#include "vision/core/error.h"
#include "vision/data/image_cache.h"

namespace vision::data {
namespace {

constexpr char kCacheMagic[8] = {'V', 'C', 'A', 'C', 'H', 'E', '1', '\n'};
constexpr size_t kCacheHeaderBytes = 40;

void cache_put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void cache_put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t cache_get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> encode_cache_file(const Image& image, int64_t imgsz, const CacheFileSource& source) {
  VISION_CHECK(image.channels == 3 && !image.empty(), "image cache: only 3-channel images are cached");
  std::vector<uint8_t> out(std::begin(kCacheMagic), std::end(kCacheMagic));
  out.reserve(kCacheHeaderBytes + image.pixels.size());
  cache_put_u32(out, static_cast<uint32_t>(image.width));
  cache_put_u32(out, static_cast<uint32_t>(image.height));
  cache_put_u32(out, static_cast<uint32_t>(imgsz));
  cache_put_u32(out, 0);
  cache_put_u64(out, source.bytes);
  cache_put_u64(out, static_cast<uint64_t>(source.mtime));
  out.insert(out.end(), image.pixels.begin(), image.pixels.end());
  return out;
}

std::optional<Image> parse_cache_file(std::span<const uint8_t> bytes, const std::string& name, int64_t imgsz,
                                      const CacheFileSource& source) {
  VISION_CHECK(bytes.size() >= kCacheHeaderBytes && std::memcmp(bytes.data(), kCacheMagic, sizeof kCacheMagic) == 0,
               "{}: not an image cache file ({} bytes; a cache file starts with a {}-byte header)", name, bytes.size(),
               kCacheHeaderBytes);
  const uint8_t* h = bytes.data();
  const int64_t w = static_cast<int64_t>(cache_get_le(h + 8, 4)), ht = static_cast<int64_t>(cache_get_le(h + 12, 4));
  const int64_t size = static_cast<int64_t>(cache_get_le(h + 16, 4));
  const uint64_t reserved = cache_get_le(h + 20, 4), src_bytes = cache_get_le(h + 24, 8);
  const int64_t src_mtime = static_cast<int64_t>(cache_get_le(h + 32, 8));
  VISION_CHECK(reserved == 0 && size > 0 && w > 0 && ht > 0 && w <= size && ht <= size && std::max(w, ht) == size,
               "{}: a damaged image cache header ({}×{} pixels at imgsz {})", name, w, ht, size);
  if (size != imgsz || src_bytes != source.bytes || src_mtime != source.mtime) return std::nullopt;  // stale
  const uint64_t pixels = static_cast<uint64_t>(w) * static_cast<uint64_t>(ht) * 3;
  VISION_CHECK(bytes.size() - kCacheHeaderBytes == pixels,
               "{}: a damaged image cache file: {} bytes of pixels where its {}×{} header needs {}", name,
               bytes.size() - kCacheHeaderBytes, w, ht, pixels);
  Image out;
  out.width = w, out.height = ht, out.channels = 3;
  out.pixels.assign(bytes.begin() + static_cast<std::ptrdiff_t>(kCacheHeaderBytes), bytes.end());
  return out;
}

}  // namespace vision::data
