#include "vision/cuda/kernel_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "vision/core/error.h"
#include "vision/cuda/sha256.h"

namespace vision::cuda {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kMagic = "VISNKRN1";  // entry format version 1
constexpr size_t kHeaderSize = 8 + 8 + 32;       // magic, payload length (little endian), sha256(payload)

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(std::string_view& in, uint64_t* v) {
  if (in.size() < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v |= uint64_t(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(8);
  return true;
}

void put_field(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

bool get_field(std::string_view& in, std::string* s) {
  uint64_t n = 0;
  if (!get_u64(in, &n) || in.size() < n) return false;
  s->assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return std::move(s).str();
}

// An exclusive flock on "<key>.lock", released when destroyed. Not acquired (fd < 0) when the file cannot be opened.
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool locked() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

void warn_uncached(const fs::path& dir, const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    // The cache holds compiled kernels and cuDNN's algorithm choices alike (ops/cuda/cudnn_conv.cpp): name both.
    std::fprintf(stderr,
                 "vision: cache %s is not usable (%s); kernels are compiled and cuDNN's convolution algorithms chosen "
                 "again in each process, without storing them\n",
                 dir.c_str(), why.c_str());
  });
}

}  // namespace

fs::path default_kernel_cache_dir() {
  if (const char* d = std::getenv("VISION_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "vision-cpp" / "kernels";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "vision-cpp" / "kernels";
  return fs::temp_directory_path() / "vision-cpp" / "kernels";
}

std::string kernel_cache_key(std::string_view source, const std::vector<std::string>& options, std::string_view arch,
                             std::string_view nvrtc_version, std::string_view name_expression) {
  // Length-prefixed fields, so that no two different inputs serialise alike.
  std::string in;
  put_field(in, kMagic);
  put_field(in, source);
  put_u64(in, options.size());
  for (const auto& o : options) put_field(in, o);
  put_field(in, arch);
  put_field(in, nvrtc_version);
  put_field(in, name_expression);
  return sha256_hex(in);
}

fs::path KernelCache::entry_path(std::string_view key) const { return dir_ / (std::string(key) + ".kernel"); }

std::optional<std::string> KernelCache::load(std::string_view key, bool* corrupt) const {
  if (corrupt) *corrupt = false;
  std::optional<std::string> bytes = read_file(entry_path(key));
  if (!bytes) return std::nullopt;
  std::string_view in(*bytes);
  uint64_t length = 0;
  const bool ok = in.size() >= kHeaderSize && in.substr(0, 8) == kMagic &&
                  (in.remove_prefix(8), get_u64(in, &length)) && in.size() == 32 + length;
  if (ok) {
    const std::string_view stored = in.substr(0, 32), payload = in.substr(32);
    const Sha256Digest actual = sha256(payload);
    if (std::memcmp(stored.data(), actual.data(), 32) == 0) return std::string(payload);
  }
  if (corrupt) *corrupt = true;
  return std::nullopt;
}

void KernelCache::store(std::string_view key, std::string_view payload) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  VISION_CHECK(!ec, "cannot create the kernel cache directory {}: {}", dir_.string(), ec.message());

  std::string entry(kMagic);
  put_u64(entry, payload.size());
  const Sha256Digest digest = sha256(payload);
  entry.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  entry.append(payload);

  // A temporary name unique to this process and thread, renamed over the entry: readers see all of it or nothing.
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = dir_ / fmt::format("{}.tmp.{}.{}", key, ::getpid(), counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(entry.data(), static_cast<std::streamsize>(entry.size()));
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      fail("cannot write the kernel cache entry {}", tmp.string());
    }
  }
  fs::rename(tmp, entry_path(key), ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail("cannot move {} into place in the kernel cache: {}", tmp.string(), ec.message());
  }
}

std::string KernelCache::get_or_build(std::string_view key, const std::function<std::string()>& build,
                                      CacheOutcome* outcome) const {
  auto report = [&](CacheOutcome o) {
    if (outcome) *outcome = o;
  };
  bool corrupt = false;
  if (auto hit = load(key, &corrupt)) {
    report(CacheOutcome::hit);
    return *hit;
  }

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    warn_uncached(dir_, ec.message());
    report(CacheOutcome::uncached);
    return build();
  }
  FileLock lock(dir_ / (std::string(key) + ".lock"));
  if (!lock.locked()) {
    warn_uncached(dir_, std::strerror(errno));
    report(CacheOutcome::uncached);
    return build();
  }
  // Whoever held the lock before us may have built the entry meanwhile.
  bool corrupt_now = false;
  if (auto hit = load(key, &corrupt_now)) {
    report(CacheOutcome::hit);
    return *hit;
  }
  std::string payload = build();
  try {
    store(key, payload);
  } catch (const Error& e) {
    warn_uncached(dir_, e.what());
    report(CacheOutcome::uncached);
    return payload;
  }
  report(corrupt || corrupt_now ? CacheOutcome::rebuilt_corrupt : CacheOutcome::built);
  return payload;
}

std::string serialize(const CompiledKernel& k) {
  std::string out;
  for (std::string_view f : {std::string_view(k.arch), std::string_view(k.lowered_name), std::string_view(k.ptx),
                             std::string_view(k.cubin), std::string_view(k.log)})
    put_field(out, f);
  return out;
}

std::optional<CompiledKernel> deserialize(std::string_view in) {
  CompiledKernel k;
  if (!get_field(in, &k.arch) || !get_field(in, &k.lowered_name) || !get_field(in, &k.ptx) ||
      !get_field(in, &k.cubin) || !get_field(in, &k.log) || !in.empty())
    return std::nullopt;
  return k;
}

}  // namespace vision::cuda
