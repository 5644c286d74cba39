// Hand-made PyTorch checkpoints for the reader's tests: pickle bytes opcode by opcode, and zip archives written with
// libzip (stored or deflated entries), so that every hostile case is built in the test itself.
#pragma once

#include <gtest/gtest.h>
#include <zip.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace vision::test {

// Pickle bytes, opcode by opcode (the names are pickle's own).
struct Pickle {
  std::string b;

  Pickle& raw(std::string_view s) { return b += s, *this; }
  Pickle& op(char c) { return b += c, *this; }
  Pickle& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Pickle& proto(int v = 2) { return op('\x80').op(static_cast<char>(v)); }
  Pickle& stop() { return op('.'); }
  Pickle& mark() { return op('('); }
  Pickle& none() { return op('N'); }
  Pickle& boolean(bool v) { return op(v ? '\x88' : '\x89'); }
  Pickle& integer(int32_t v) { return op('J').le(static_cast<uint32_t>(v), 4); }
  Pickle& str(std::string_view s) { return op('X').le(s.size(), 4).raw(s); }
  Pickle& global(std::string_view module, std::string_view name) {
    return op('c').raw(module).op('\n').raw(name).op('\n');
  }
  Pickle& tuple() { return op('t'); }
  Pickle& empty_tuple() { return op(')'); }
  Pickle& empty_dict() { return op('}'); }
  Pickle& empty_list() { return op(']'); }
  Pickle& append() { return op('a'); }
  Pickle& setitem() { return op('s'); }
  Pickle& setitems() { return op('u'); }
  Pickle& reduce() { return op('R'); }
  Pickle& build() { return op('b'); }
  Pickle& newobj() { return op('\x81'); }
  Pickle& binpersid() { return op('Q'); }
  Pickle& put(uint32_t i) { return op('r').le(i, 4); }
  Pickle& get(uint32_t i) { return op('j').le(i, 4); }

  // torch._utils._rebuild_tensor_v2 of storage `key` (a torch.<type>, `numel` elements) with the given size, stride
  // and offset.
  Pickle& tensor(std::string_view key, std::string_view type, int64_t numel, const std::vector<int64_t>& size,
                 const std::vector<int64_t>& stride, int64_t offset = 0) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    mark().str("storage").global("torch", type).str(key).str("cpu").integer(static_cast<int32_t>(numel)).tuple();
    binpersid().integer(static_cast<int32_t>(offset));
    mark();
    for (int64_t s : size) integer(static_cast<int32_t>(s));
    tuple().mark();
    for (int64_t s : stride) integer(static_cast<int32_t>(s));
    tuple().boolean(false).global("collections", "OrderedDict").empty_tuple().reduce();
    return tuple().reduce();
  }
  // An object of `cls` (module.name) made as PyTorch pickles a Module: NEWOBJ, then BUILD with the attribute dict the
  // caller writes between begin_object and end_object (as key, value pairs).
  Pickle& begin_object(std::string_view module, std::string_view name) {
    return global(module, name).empty_tuple().newobj().empty_dict().mark();
  }
  Pickle& end_object() { return setitems().build(); }
};

// A zip archive at path holding the entries (name, bytes), written with libzip: stored, or compressed with `method`.
inline void write_zip(const std::filesystem::path& path, const std::vector<std::pair<std::string, std::string>>& entries,
                      int32_t method = ZIP_CM_STORE) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr) << "zip_open: " << err;
  for (const auto& [name, bytes] : entries) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    ASSERT_NE(src, nullptr);
    const zip_int64_t i = zip_file_add(z, name.c_str(), src, ZIP_FL_ENC_UTF_8);
    ASSERT_GE(i, 0) << zip_strerror(z);
    ASSERT_EQ(zip_set_file_compression(z, static_cast<zip_uint64_t>(i), method, 0), 0) << zip_strerror(z);
  }
  ASSERT_EQ(zip_close(z), 0) << "zip_close";  // the sources' bytes are read here: `entries` outlives it
}

// A checkpoint archive in folder `folder`: data.pkl, the storages data/<key>, and a version entry.
inline void write_checkpoint(const std::filesystem::path& path, const std::string& pickle,
                             const std::vector<std::pair<std::string, std::string>>& storages = {},
                             const std::string& folder = "archive", int32_t method = ZIP_CM_STORE) {
  std::vector<std::pair<std::string, std::string>> entries = {{folder + "/data.pkl", pickle}};
  for (const auto& [key, bytes] : storages) entries.emplace_back(folder + "/data/" + key, bytes);
  entries.emplace_back(folder + "/version", "3\n");
  write_zip(path, entries, method);
}

}  // namespace vision::test
