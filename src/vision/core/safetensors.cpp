#include "vision/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "vision/core/error.h"
#include "vision/core/json.h"

namespace vision::core {

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian and are read and written as raw bytes");

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// A header longer than this is not a real header (the reference implementation has the same limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kSupported = "F32, F16, BF16, I32, I64, U8, BOOL";

std::string where(const fs::path& p) { return fmt::format("safetensors file '{}'", p.string()); }

std::string errno_text(int err) { return std::strerror(err); }

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes at offset; returns fewer only at end of file. Throws on an I/O error.
size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const fs::path& path) {
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    const ssize_t r = ::pread(fd, static_cast<std::byte*>(buf) + done, chunk, static_cast<off_t>(offset + done));
    if (r < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      fail_input("{}: read error at byte {}: {}", where(path), offset + done, errno_text(err));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

// Writes all n bytes; returns false (errno set) on failure.
bool write_full(int fd, const void* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    const ssize_t r = ::write(fd, static_cast<const std::byte*>(buf) + done, chunk);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(r);
  }
  return true;
}

// One validated header entry.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Tracks the keys of every object being parsed, to catch keys that appear twice (a JSON object parsed into a map
// would silently keep the last one).
struct DuplicateKeys {
  std::vector<std::set<std::string>> open_objects;
  std::string top_key;  // the last key of the outermost object: the tensor being parsed
  std::string problem;  // the first duplicate found, described

  bool on_event(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (open_objects.empty()) break;
        const auto& key = parsed.get_ref<const std::string&>();
        if (open_objects.size() == 1) top_key = key;
        if (!open_objects.back().insert(key).second && problem.empty()) {
          if (open_objects.size() == 1)
            problem = key == kMetadataKey ? fmt::format("\"{}\" appears more than once in the header", kMetadataKey)
                                          : fmt::format("tensor '{}' appears more than once in the header", key);
          else
            problem = fmt::format("key \"{}\" appears more than once in the entry of '{}'", key, top_key);
        }
        break;
      }
      default: break;
    }
    return true;
  }
};

Json parse_header(const std::string& text, const fs::path& path) {
  DuplicateKeys dups;
  // A header is an object of tensor entries: it nests three levels ("name": {"shape": [...]}); deeper is refused
  // before it is built.
  const Json header = parse_json(text, fmt::format("{}: the header", where(path)), 8,
                                 [&](int, Json::parse_event_t ev, Json& parsed) { return dups.on_event(ev, parsed); });
  VISION_CHECK_INPUT(header.is_object(), "{}: the header is a JSON {}, expected an object of tensor entries", where(path),
               header.type_name());
  VISION_CHECK_INPUT(dups.problem.empty(), "{}: {}", where(path), dups.problem);
  return header;
}

std::map<std::string, std::string> parse_metadata(const Json& j, const fs::path& path) {
  VISION_CHECK_INPUT(j.is_object(), "{}: \"{}\" is a JSON {}, expected an object of string values", where(path),
               kMetadataKey, j.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    VISION_CHECK_INPUT(value.is_string(), "{}: \"{}\" entry '{}' is a JSON {}, expected a string", where(path),
                 kMetadataKey, key, value.type_name());
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

Entry parse_entry(const std::string& name, const Json& j, uint64_t data_size, const fs::path& path) {
  const std::string ctx = fmt::format("{}: tensor '{}'", where(path), name);
  VISION_CHECK_INPUT(j.is_object(), "{}: the entry is a JSON {}, expected an object with \"dtype\", \"shape\" and "
               "\"data_offsets\"", ctx, j.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    VISION_CHECK_INPUT(j.contains(key), "{}: the entry has no \"{}\" (it needs \"dtype\", \"shape\" and \"data_offsets\")",
                 ctx, key);
  Entry e;
  e.name = name;

  const Json& dtype = j["dtype"];
  VISION_CHECK_INPUT(dtype.is_string(), "{}: \"dtype\" is a JSON {}, expected a string such as \"F32\"", ctx,
               dtype.type_name());
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  VISION_CHECK_INPUT(parse_safetensors_dtype(dtype_str, &e.dtype),
               "{}: dtype \"{}\" is not one this engine reads ({}); convert the tensor before saving", ctx, dtype_str,
               kSupported);

  const Json& shape = j["shape"];
  VISION_CHECK_INPUT(shape.is_array(), "{}: \"shape\" is a JSON {}, expected an array of non-negative integers", ctx,
               shape.type_name());
  std::vector<int64_t> dims;
  for (const Json& d : shape) {
    VISION_CHECK_INPUT(d.is_number_integer(), "{}: \"shape\" {} holds a JSON {}, expected non-negative integers", ctx,
                 shape.dump(), d.type_name());
    if (d.is_number_unsigned()) {
      VISION_CHECK_INPUT(d.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                   "{}: dimension {} in \"shape\" is too large", ctx, d.dump());
    } else {
      VISION_CHECK_INPUT(d.get<int64_t>() >= 0, "{}: negative dimension {} in \"shape\" {}", ctx, d.dump(), shape.dump());
    }
    dims.push_back(d.get<int64_t>());
  }
  e.shape = Shape(std::move(dims));
  uint64_t nbytes = dtype_size(e.dtype);
  for (int64_t d : e.shape.dims())
    VISION_CHECK_INPUT(!__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes),
                 "{}: shape {} is too large to address", ctx, e.shape.str());

  const Json& offsets = j["data_offsets"];
  VISION_CHECK_INPUT(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               "{}: \"data_offsets\" is {}, expected [begin, end] with two non-negative integers", ctx,
               offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  VISION_CHECK_INPUT(e.begin <= e.end, "{}: \"data_offsets\" [{}, {}] end before they begin", ctx, e.begin, e.end);
  VISION_CHECK_INPUT(e.end <= data_size,
               "{}: \"data_offsets\" [{}, {}] lie outside the data section, which has {} bytes (file truncated?)", ctx,
               e.begin, e.end, data_size);
  VISION_CHECK_INPUT(e.end - e.begin == nbytes,
               "{}: \"data_offsets\" [{}, {}] span {} bytes, but {} {} needs {} elements x {} bytes = {} bytes", ctx,
               e.begin, e.end, e.end - e.begin, safetensors_dtype_name(e.dtype), e.shape.str(), e.shape.numel(),
               dtype_size(e.dtype), nbytes);
  return e;
}

// The ranges must cover [0, data_size) exactly, with no overlaps or holes. Sorts entries by offset.
void check_coverage(std::vector<Entry>& entries, uint64_t data_size, const fs::path& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const Entry* last = nullptr;  // the entry that ends at `covered`
  for (const Entry& e : entries) {
    if (e.begin < covered)
      fail_input("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", where(path), last->name,
           last->begin, last->end, e.name, e.begin, e.end);
    if (e.begin > covered)
      fail_input("{}: bytes [{}, {}) of the data section belong to no tensor (before tensor '{}'); the format requires the "
           "tensors to cover the data section without holes",
           where(path), covered, e.begin, e.name);
    covered = e.end;
    last = &e;
  }
  VISION_CHECK_INPUT(covered == data_size,
               "{}: the last {} bytes of the {}-byte data section belong to no tensor; the format requires the tensors "
               "to cover the data section without holes",
               where(path), data_size - covered, data_size);
}

using ChunkWriter = std::function<void(const void*, size_t)>;

// Writes `path` atomically: `body` writes the contents through its ChunkWriter into "<path>.tmp.<pid>", which is
// fsynced and renamed over path (then the directory is fsynced, best effort). On any failure the temporary file is
// removed, whatever was at path is left as it was, and vision::Error names `what`.
void write_atomically(const fs::path& path, const std::string& what, const std::function<void(const ChunkWriter&)>& body) {
  // Write a temporary file next to the target, then rename it over the target.
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  struct TempFile {
    fs::path path;
    int fd = -1;
    bool committed = false;
    ~TempFile() {
      if (fd >= 0) ::close(fd);
      if (!committed) ::unlink(path.c_str());
    }
  } temp{tmp};
  temp.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (temp.fd < 0) {
    const int err = errno;
    temp.committed = true;  // nothing was created: leave whatever is at tmp alone
    if (err == ENOENT)
      fail("writing {}: cannot create '{}': the directory '{}' does not exist", what, tmp.string(),
           path.parent_path().string());
    fail("writing {}: cannot create '{}': {}", what, tmp.string(), errno_text(err));
  }
  auto check_io = [&](bool ok, std::string_view action) {
    if (ok) return;
    const int err = errno;
    fail("writing {}: cannot {} '{}': {}", what, action, tmp.string(), errno_text(err));
  };
  body([&](const void* data, size_t n) { check_io(write_full(temp.fd, data, n), "write to"); });
  check_io(::fsync(temp.fd) == 0, "fsync");
  const int fd = temp.fd;
  temp.fd = -1;
  check_io(::close(fd) == 0, "close");
  check_io(::rename(tmp.c_str(), path.c_str()) == 0, "rename into place");
  temp.committed = true;

  // Make the rename itself durable (best effort: some file systems cannot fsync a directory).
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  FdCloser dir_fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd >= 0) ::fsync(dir_fd.fd);
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  const Tensor* t = find(name);
  VISION_CHECK_INPUT(t, "{}: has no tensor '{}' ({} tensors in the file)", where(path), name, tensors.size());
  return *t;
}

SafetensorsFile read_safetensors(const fs::path& path) {
  FdCloser file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    const int err = errno;
    if (err == ENOENT) fail_input("{}: file not found", where(path));
    fail_input("{}: cannot open: {}", where(path), errno_text(err));
  }
  struct stat st{};
  if (::fstat(file.fd, &st) != 0) {
    const int err = errno;
    fail_input("{}: cannot stat: {}", where(path), errno_text(err));
  }
  VISION_CHECK_INPUT(S_ISREG(st.st_mode), "{}: is {}, not a regular file", where(path),
               S_ISDIR(st.st_mode) ? "a directory" : "a special file");
  const auto file_size = static_cast<uint64_t>(st.st_size);

  VISION_CHECK_INPUT(file_size >= 8,
               "{}: the file has {} bytes, too few for the 8-byte header length (empty or truncated file?)",
               where(path), file_size);
  unsigned char len_bytes[8];
  VISION_CHECK_INPUT(pread_full(file.fd, len_bytes, 8, 0, path) == 8, "{}: the file ended while reading the header length",
               where(path));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  VISION_CHECK_INPUT(header_len <= kMaxHeaderBytes,
               "{}: the header length is {} bytes, more than the {} byte limit (not a safetensors file?)", where(path),
               header_len, kMaxHeaderBytes);
  VISION_CHECK_INPUT(header_len <= file_size - 8,
               "{}: the header length is {} bytes, but only {} bytes follow the length field (file truncated?)",
               where(path), header_len, file_size - 8);

  std::string text(header_len, '\0');
  VISION_CHECK_INPUT(pread_full(file.fd, text.data(), header_len, 8, path) == header_len,
               "{}: the file ended while reading the header (was it changed while being read?)", where(path));
  const Json header = parse_header(text, path);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;

  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(value, path);
    else
      entries.push_back(parse_entry(key, value, data_size, path));
  }
  check_coverage(entries, data_size, path);

  // One aligned allocation and one read for the whole data section.
  const uint64_t alloc = std::max<uint64_t>((data_size + 63) / 64 * 64, 64);
  VISION_CHECK_INPUT(alloc <= std::numeric_limits<size_t>::max(), "{}: the data section is too large", where(path));
  void* mem = std::aligned_alloc(64, static_cast<size_t>(alloc));
  VISION_CHECK_INPUT(mem, "{}: out of host memory allocating {} bytes for the data section", where(path), data_size);
  std::shared_ptr<void> owner(mem, [](void* p) { std::free(p); });
  VISION_CHECK_INPUT(pread_full(file.fd, mem, data_size, data_start, path) == data_size,
               "{}: the file ended while reading the data section (was it changed while being read?)", where(path));

  auto* base = static_cast<std::byte*>(mem);
  out.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    std::byte* p = base + e.begin;
    if (e.dtype == DType::boolean)
      for (uint64_t i = 0; i < e.end - e.begin; ++i)
        VISION_CHECK_INPUT(static_cast<uint8_t>(p[i]) <= 1, "{}: tensor '{}' is BOOL but byte {} holds {} (only 0 or 1)",
                     where(path), e.name, i, static_cast<int>(p[i]));
    if (e.begin % dtype_size(e.dtype) == 0) {
      out.tensors.emplace_back(std::move(e.name), Tensor::wrap(owner, p, std::move(e.shape), e.dtype, Device::cpu));
    } else {  // misaligned for its element type: give it its own aligned copy
      Tensor t = Tensor::zeros(std::move(e.shape), e.dtype);
      if (t.nbytes()) std::memcpy(t.raw(), p, t.nbytes());
      out.tensors.emplace_back(std::move(e.name), std::move(t));
    }
  }
  return out;
}

void write_safetensors(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before touching the file system.
  struct Item {
    const std::string* name;
    Tensor tensor;
  };
  std::vector<Item> items;
  std::set<std::string_view> names;
  for (const auto& [name, t] : tensors) {
    const std::string ctx = fmt::format("writing {}: tensor '{}'", where(path), name);
    VISION_CHECK(!name.empty(), "writing {}: a tensor has an empty name", where(path));
    VISION_CHECK(name != kMetadataKey, "{}: the name is reserved for the metadata", ctx);
    VISION_CHECK(names.insert(name).second, "{}: the name is given more than once", ctx);
    VISION_CHECK(t.defined(), "{}: the tensor is undefined", ctx);
    VISION_CHECK(t.device() == Device::cpu, "{}: the tensor is on {}; copy it to the host first", ctx,
                 device_name(t.device()));
    VISION_CHECK(t.raw() || t.nbytes() == 0, "{}: the tensor has no data", ctx);
    // The file holds row-major data of the (N, C, H, W) shape.
    items.push_back({&name, t.layout() == Layout::nhwc && t.rank() == 4 ? to_layout(t, Layout::nchw) : t});
  }
  // Largest elements first, so each tensor starts at a multiple of its element size with no padding.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    const size_t sa = dtype_size(a.tensor.dtype()), sb = dtype_size(b.tensor.dtype());
    return sa != sb ? sa > sb : *a.name < *b.name;
  });

  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header[std::string(kMetadataKey)] = std::move(m);
  }
  uint64_t offset = 0;
  for (const Item& it : items) {
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(safetensors_dtype_name(it.tensor.dtype()));
    entry["shape"] = OrderedJson::array();
    for (int64_t d : it.tensor.shape().dims()) entry["shape"].push_back(d);
    entry["data_offsets"] = OrderedJson::array({offset, offset + it.tensor.nbytes()});
    header[*it.name] = std::move(entry);
    offset += it.tensor.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const OrderedJson::exception& e) {
    fail("writing {}: cannot encode the header ({}); tensor names and metadata must be valid UTF-8", where(path),
         e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  write_atomically(path, where(path), [&](const ChunkWriter& write) {
    write(len_bytes, 8);
    write(text.data(), text.size());
    for (const Item& it : items) write(it.tensor.raw(), it.tensor.nbytes());
  });
}

void copy_file_atomic(const fs::path& from, const fs::path& to) {
  const std::string what = fmt::format("'{}' (a copy of '{}')", to.string(), from.string());
  FdCloser in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("copying '{}' to '{}': {}", from.string(), to.string(), errno_text(errno));
  write_atomically(to, what, [&](const ChunkWriter& write) {
    std::vector<std::byte> buffer(size_t{1} << 20);
    for (uint64_t offset = 0;;) {
      const size_t got = pread_full(in.fd, buffer.data(), buffer.size(), offset, from);
      if (got == 0) break;
      write(buffer.data(), got);
      offset += got;
    }
  });
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  write_atomically(path, where(path), [&](const ChunkWriter& write) { write(bytes.data(), bytes.size()); });
}

}  // namespace vision::core
