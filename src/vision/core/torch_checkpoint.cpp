#include "vision/core/torch_checkpoint.h"

#include <fmt/ranges.h>
#include <sys/stat.h>
#include <zip.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include "vision/core/error.h"

namespace vision::core {

static_assert(std::endian::native == std::endian::little, "checkpoint storages are little-endian and used as stored");

namespace {

namespace fs = std::filesystem;
using Kind = PyValue::Kind;
using Limits = TorchPickleLimits;

// ---- What the pickle may name ----------------------------------------------------------------------------------

enum class Global : int64_t {
  rebuild_tensor, rebuild_parameter, rebuild_parameter_with_state, storage_type, ordered_dict, set, frozenset,
  torch_size, module_class, dtype, path, codecs_encode, numpy_scalar, numpy_reconstruct, numpy_dtype, numpy_ndarray,
  getattr_,
};

struct StorageType {
  std::string_view name;         // torch.<name>
  std::string_view torch_dtype;  // PyTorch's name of its element type
  size_t element_size;
  std::optional<DType> dtype;    // the engine's, when it has one
};

constexpr StorageType kStorageTypes[] = {
    {"HalfStorage", "float16", 2, DType::f16},          {"FloatStorage", "float32", 4, DType::f32},
    {"BFloat16Storage", "bfloat16", 2, DType::bf16},    {"DoubleStorage", "float64", 8, std::nullopt},
    {"LongStorage", "int64", 8, DType::i64},            {"IntStorage", "int32", 4, DType::i32},
    {"ShortStorage", "int16", 2, std::nullopt},         {"CharStorage", "int8", 1, std::nullopt},
    {"ByteStorage", "uint8", 1, DType::u8},             {"BoolStorage", "bool", 1, DType::boolean},
    {"ComplexFloatStorage", "complex64", 8, std::nullopt},
    {"ComplexDoubleStorage", "complex128", 16, std::nullopt},
    {"UntypedStorage", "uint8", 1, DType::u8},
};

const StorageType* storage_type(std::string_view name) {
  for (const StorageType& t : kStorageTypes)
    if (t.name == name) return &t;
  return nullptr;
}

constexpr std::string_view kTorchDtypes[] = {
    "float16", "half",  "float32", "float", "float64", "double", "bfloat16", "int64",  "long",      "int32",
    "int",     "int16", "short",   "int8",  "uint8",   "bool",   "complex64", "cfloat", "complex128", "cdouble"};

// What a global names, or nullopt for anything this reader refuses. Module names are as Python 3 spells them
// (protocol 2's "__builtin__" is mapped first).
std::optional<Global> resolve(std::string_view module, std::string_view name) {
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor_v2") return Global::rebuild_tensor;
    if (name == "_rebuild_parameter") return Global::rebuild_parameter;
    if (name == "_rebuild_parameter_with_state") return Global::rebuild_parameter_with_state;
    return std::nullopt;
  }
  if (module == "torch") {
    if (name == "Size") return Global::torch_size;
    if (storage_type(name)) return Global::storage_type;
    for (std::string_view d : kTorchDtypes)
      if (d == name) return Global::dtype;
    return std::nullopt;
  }
  if (module == "torch.storage" && name == "UntypedStorage") return Global::storage_type;
  if (module == "collections" && name == "OrderedDict") return Global::ordered_dict;
  if (module == "builtins") {
    if (name == "set") return Global::set;
    if (name == "frozenset") return Global::frozenset;
    if (name == "getattr") return Global::getattr_;
    return std::nullopt;
  }
  const auto identifier = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    });
  };
  if ((module.starts_with("ultralytics.nn.") || module.starts_with("torch.nn.modules.")) && identifier(name))
    return Global::module_class;
  if (module == "ultralytics.utils" && name == "IterableSimpleNamespace") return Global::module_class;
  if (module == "pathlib" &&
      (name == "Path" || name == "PosixPath" || name == "WindowsPath" || name == "PurePath" ||
       name == "PurePosixPath" || name == "PureWindowsPath"))
    return Global::path;
  if (module == "_codecs" && name == "encode") return Global::codecs_encode;
  if (module == "numpy.core.multiarray" || module == "numpy._core.multiarray") {
    if (name == "scalar") return Global::numpy_scalar;
    if (name == "_reconstruct") return Global::numpy_reconstruct;
    return std::nullopt;
  }
  if (module == "numpy" && name == "dtype") return Global::numpy_dtype;
  if (module == "numpy" && name == "ndarray") return Global::numpy_ndarray;
  return std::nullopt;
}

// ---- Small helpers -----------------------------------------------------------------------------------------------

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::bytes: return "bytes";
    case Kind::tuple: return "tuple";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::set: return "set";
    case Kind::global: return "global";
    case Kind::object: return "object";
    case Kind::tensor: return "tensor";
    case Kind::storage: return "storage";
    case Kind::opaque: return "placeholder";
  }
  return "value";
}

// A string short and safe enough for a message (printable ASCII, at most 60 characters).
std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 60) out += "…";
  return out;
}

// Closes a read-only archive without writing anything.
struct ZipDiscard {
  void operator()(zip_t* z) const { zip_discard(z); }
};

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}

// Deflate expands at most 1032 times (RFC 1951: 258 bytes from a 2-bit code is the best case).
constexpr uint64_t kDeflateMaxRatio = 1032;

struct StorageEntry {
  std::string key;
  uint64_t nbytes = 0;
  int64_t zip_index = -1;    // the archive's entry, or -1 for a storage given in memory
  std::string memory;        // from_pickle's bytes
  std::shared_ptr<void> data;  // the bytes, 64-byte aligned, once read
};

}  // namespace

// ---- PyValue -----------------------------------------------------------------------------------------------------

const PyValue* PyValue::get(std::string_view key) const {
  const PyValue* dict = kind == Kind::dict ? this : (kind == Kind::object && state ? state : nullptr);
  if (!dict || dict->kind != Kind::dict) return nullptr;
  for (size_t i = dict->items.size(); i >= 2; i -= 2) {
    const PyValue* k = dict->items[i - 2];
    if (k->kind == Kind::string && k->text == key) return dict->items[i - 1];
  }
  return nullptr;
}

const PyValue* PyValue::get(int64_t key) const {
  if (kind != Kind::dict) return nullptr;
  for (size_t i = items.size(); i >= 2; i -= 2) {
    const PyValue* k = items[i - 2];
    if (k->kind == Kind::integer && k->integer == key) return items[i - 1];
  }
  return nullptr;
}

std::string PyValue::describe() const {
  switch (kind) {
    case Kind::object: return fmt::format("{} object", excerpt(text));
    case Kind::global: return fmt::format("global {}", excerpt(text));
    case Kind::opaque: return fmt::format("placeholder for {}", excerpt(text));
    case Kind::string: return fmt::format("str '{}'", excerpt(text));
    case Kind::integer: return fmt::format("int {}", integer);
    default: return std::string(kind_name(kind));
  }
}

// ---- The checkpoint ----------------------------------------------------------------------------------------------

struct TorchCheckpoint::Impl {
  fs::path path;
  uint64_t file_size = 0;
  std::unique_ptr<zip_t, ZipDiscard> zip;
  std::string folder;                  // the archive's top folder
  std::deque<PyValue> values;          // the arena: every value of the pickle
  std::vector<TorchTensorInfo> tensors;
  std::vector<StorageEntry> storages;
  std::unordered_map<std::string, size_t> storage_by_key;
  const PyValue* root = nullptr;

  std::string where() const { return fmt::format("PyTorch checkpoint '{}'", path.string()); }

  // The size of an archive entry, after checking that it can be read as it claims.
  uint64_t entry_size(zip_uint64_t index, std::string_view name) const {
    zip_stat_t st;
    zip_stat_init(&st);
    VISION_CHECK_INPUT(zip_stat_index(zip.get(), index, 0, &st) == 0, "{}: cannot read the zip entry {}: {}", where(),
                 excerpt(name), zip_strerror(zip.get()));
    const zip_uint64_t need = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    VISION_CHECK_INPUT((st.valid & need) == need, "{}: the zip entry {} does not say its sizes", where(), excerpt(name));
    VISION_CHECK_INPUT(!(st.valid & ZIP_STAT_ENCRYPTION_METHOD) || st.encryption_method == ZIP_EM_NONE,
                 "{}: the zip entry {} is encrypted", where(), excerpt(name));
    VISION_CHECK_INPUT(st.comp_size <= file_size,
                 "{}: the zip entry {} claims {} bytes of data, more than the file's {} (truncated?)", where(),
                 excerpt(name), st.comp_size, file_size);
    if (st.comp_method == ZIP_CM_STORE) {
      VISION_CHECK_INPUT(st.size == st.comp_size, "{}: the stored zip entry {} claims {} bytes but holds {}", where(),
                   excerpt(name), st.size, st.comp_size);
    } else if (st.comp_method == ZIP_CM_DEFLATE) {
      VISION_CHECK_INPUT(st.size / kDeflateMaxRatio <= st.comp_size,
                   "{}: the zip entry {} claims {} bytes from {} deflated bytes, more than deflate can expand", where(),
                   excerpt(name), st.size, st.comp_size);
    } else {
      fail_input("{}: the zip entry {} is compressed with method {}; PyTorch checkpoints store their entries (stored or "
           "deflated entries are read)",
           where(), excerpt(name), st.comp_method);
    }
    return st.size;
  }

  // Reads exactly n bytes of an entry (its whole size) into dst; the CRC is checked.
  void read_entry(zip_uint64_t index, std::string_view name, void* dst, uint64_t n) const {
    zip_file_t* f = zip_fopen_index(zip.get(), index, 0);
    VISION_CHECK_INPUT(f != nullptr, "{}: cannot open the zip entry {}: {}", where(), excerpt(name), zip_strerror(zip.get()));
    std::string problem;
    uint64_t done = 0;
    while (done < n && problem.empty()) {
      const zip_int64_t r = zip_fread(f, static_cast<char*>(dst) + done, std::min<uint64_t>(n - done, 1u << 30));
      if (r < 0) problem = zip_file_strerror(f);
      else if (r == 0) problem = fmt::format("it ends after {} of its {} bytes (truncated?)", done, n);
      else done += static_cast<uint64_t>(r);
    }
    if (problem.empty()) {  // read to the end, so that libzip checks the CRC
      char extra = 0;
      const zip_int64_t r = zip_fread(f, &extra, 1);
      if (r < 0) problem = zip_file_strerror(f);
      else if (r > 0) problem = fmt::format("it holds more than the {} bytes it claims", n);
    }
    const int closed = zip_fclose(f);
    if (problem.empty() && closed != 0) problem = zip_error_text(closed);
    VISION_CHECK_INPUT(problem.empty(), "{}: the zip entry {}: {}", where(), excerpt(name), problem);
  }

  // The index of the storage called key (its archive entry found and checked on first use).
  size_t storage(const std::string& key) {
    if (auto it = storage_by_key.find(key); it != storage_by_key.end()) return it->second;
    StorageEntry s;
    s.key = key;
    if (zip) {
      const std::string name = folder + "/data/" + key;
      const zip_int64_t index = zip_name_locate(zip.get(), name.c_str(), ZIP_FL_ENC_RAW);
      VISION_CHECK_INPUT(index >= 0, "{}: the pickle names storage '{}', but the archive has no entry {}", where(),
                   excerpt(key), excerpt(name));
      s.zip_index = index;
      s.nbytes = entry_size(static_cast<zip_uint64_t>(index), name);
    } else {
      fail_input("{}: the pickle names storage '{}', which is not given", where(), excerpt(key));
    }
    storages.push_back(std::move(s));
    storage_by_key.emplace(key, storages.size() - 1);
    return storages.size() - 1;
  }

  // The bytes of a storage, read on first use.
  const std::byte* storage_data(size_t i) {
    StorageEntry& s = storages[i];
    if (!s.data) {
      const size_t alloc = std::max<size_t>((s.nbytes + 63) / 64 * 64, 64);
      void* mem = std::aligned_alloc(64, alloc);
      VISION_CHECK_INPUT(mem, "{}: out of host memory reading storage '{}' ({} bytes)", where(), s.key, s.nbytes);
      std::shared_ptr<void> owner(mem, [](void* p) { std::free(p); });
      if (s.zip_index >= 0)
        read_entry(static_cast<zip_uint64_t>(s.zip_index), folder + "/data/" + s.key, mem, s.nbytes);
      else if (s.nbytes)
        std::memcpy(mem, s.memory.data(), s.nbytes);
      s.data = std::move(owner);
    }
    return static_cast<const std::byte*>(s.data.get());
  }
};

namespace {

// ---- The unpickler -----------------------------------------------------------------------------------------------

class Unpickler {
 public:
  Unpickler(std::string_view data, TorchCheckpoint::Impl& ck) : data_(data), ck_(ck) {}

  const PyValue* load() {
    for (;;) {
      op_pos_ = pos_;
      if (pos_ >= data_.size()) bad("the pickle ends without a STOP opcode (truncated?)");
      op_ = static_cast<uint8_t>(data_[pos_++]);
      switch (op_) {
        case 0x80: {  // PROTO
          const uint8_t v = u8();
          if (v < 2 || v > 5) bad("pickle protocol {}; PyTorch checkpoints use protocols 2 to 5", v);
          break;
        }
        case 0x95: {  // FRAME: advisory, its length only checked
          const uint64_t n = uint_le(8);
          if (n > data_.size() - pos_)
            bad("a FRAME of {} bytes, but only {} follow (truncated?)", n, data_.size() - pos_);
          break;
        }
        case '.': return pop();  // STOP
        case '(':                // MARK
          if (marks_.size() >= Limits::max_marks) bad("more than {} MARKs open at once", Limits::max_marks);
          marks_.push_back(stack_.size());
          break;
        case '0':  // POP: an item, or an empty frame's mark
          if (!marks_.empty() && stack_.size() == marks_.back()) marks_.pop_back();
          else pop();
          break;
        case '1': pop_mark(); break;  // POP_MARK
        case '2': push(top()); break;  // DUP

        case 'J': push_int(static_cast<int32_t>(uint_le(4))); break;  // BININT
        case 'K': push_int(u8()); break;                              // BININT1
        case 'M': push_int(static_cast<int64_t>(uint_le(2))); break;  // BININT2
        case 0x8a: push_int(read_long(u8())); break;                  // LONG1
        case 0x8b: {                                                  // LONG4
          const int32_t n = static_cast<int32_t>(uint_le(4));
          if (n < 0) bad("LONG4 with a negative length {}", n);
          push_int(read_long(static_cast<uint64_t>(n)));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian
          uint64_t bits = 0;
          for (char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
          PyValue* v = make(Kind::floating);
          v->floating = std::bit_cast<double>(bits);
          push(v);
          break;
        }
        case 'N': push(make(Kind::none)); break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          PyValue* v = make(Kind::boolean);
          v->flag = op_ == 0x88;
          push(v);
          break;
        }

        case 'X': push_text(Kind::string, uint_le(4)); break;   // BINUNICODE
        case 0x8c: push_text(Kind::string, u8()); break;        // SHORT_BINUNICODE
        case 0x8d: push_text(Kind::string, uint_le(8)); break;  // BINUNICODE8
        case 'T': {                                             // BINSTRING (Python 2 str, kept as text)
          const int32_t n = static_cast<int32_t>(uint_le(4));
          if (n < 0) bad("BINSTRING with a negative length {}", n);
          push_text(Kind::string, static_cast<uint64_t>(n));
          break;
        }
        case 'U': push_text(Kind::string, u8()); break;          // SHORT_BINSTRING
        case 'B': push_text(Kind::bytes, uint_le(4)); break;     // BINBYTES
        case 'C': push_text(Kind::bytes, u8()); break;           // SHORT_BINBYTES
        case 0x8e:                                               // BINBYTES8
        case 0x96: push_text(Kind::bytes, uint_le(8)); break;    // BYTEARRAY8

        case ')': push(make(Kind::tuple)); break;  // EMPTY_TUPLE
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1-3
          const size_t n = op_ - 0x84u;
          if (frame_size() < n) bad("TUPLE{} needs {} values on the stack", n, n);
          PyValue* t = make(Kind::tuple);
          add_items(t, stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(t);
          break;
        }
        case 't': {  // TUPLE
          PyValue* t = make(Kind::tuple);
          take_mark(t);
          push(t);
          break;
        }
        case ']': push(make(Kind::list)); break;  // EMPTY_LIST
        case 'l': {                               // LIST
          PyValue* l = make(Kind::list);
          take_mark(l);
          push(l);
          break;
        }
        case '}': push(make(Kind::dict)); break;  // EMPTY_DICT
        case 'd': {                               // DICT
          PyValue* d = make(Kind::dict);
          take_mark(d);
          if (d->items.size() % 2) bad("DICT with an odd number of keys and values");
          push(d);
          break;
        }
        case 0x8f: push(make(Kind::set)); break;  // EMPTY_SET
        case 0x91: {                              // FROZENSET
          PyValue* s = make(Kind::set);
          take_mark(s);
          push(s);
          break;
        }
        case 'a': {  // APPEND
          PyValue* v = pop();
          PyValue* list = expect_top(Kind::list, "APPEND");
          add_items(list, &v, &v + 1);
          break;
        }
        case 'e': {  // APPENDS
          const size_t mark = pop_mark_position();
          PyValue* list = below_mark(mark, Kind::list, "APPENDS");
          add_items(list, stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
          stack_.resize(mark);
          break;
        }
        case 's': {  // SETITEM
          PyValue* value = pop();
          PyValue* key = pop();
          PyValue* dict = expect_top(Kind::dict, "SETITEM");
          PyValue* pair[] = {key, value};
          add_items(dict, std::begin(pair), std::end(pair));
          break;
        }
        case 'u': {  // SETITEMS
          const size_t mark = pop_mark_position();
          if ((stack_.size() - mark) % 2) bad("SETITEMS with an odd number of keys and values");
          PyValue* dict = below_mark(mark, Kind::dict, "SETITEMS");
          add_items(dict, stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
          stack_.resize(mark);
          break;
        }
        case 0x90: {  // ADDITEMS
          const size_t mark = pop_mark_position();
          PyValue* set = below_mark(mark, Kind::set, "ADDITEMS");
          add_items(set, stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
          stack_.resize(mark);
          break;
        }

        case 'q': memo_put(u8()); break;                                  // BINPUT
        case 'r': memo_put(static_cast<uint32_t>(uint_le(4))); break;     // LONG_BINPUT
        case 0x94: memo_put(static_cast<uint64_t>(memo_.size())); break;  // MEMOIZE
        case 'h': memo_get(u8()); break;                                  // BINGET
        case 'j': memo_get(static_cast<uint32_t>(uint_le(4))); break;     // LONG_BINGET

        case 'c': {  // GLOBAL
          const std::string module = line();
          const std::string name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          PyValue* name = pop();
          PyValue* module = pop();
          if (module->kind != Kind::string || name->kind != Kind::string)
            bad("STACK_GLOBAL takes two strings, got a {} and a {}", module->describe(), name->describe());
          push(global(module->text, name->text));
          break;
        }
        case 'R': {  // REDUCE
          PyValue* args = pop();
          PyValue* callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          PyValue* args = pop();
          PyValue* cls = pop();
          push(newobj(cls, args, nullptr));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          PyValue* kwargs = pop();
          PyValue* args = pop();
          PyValue* cls = pop();
          push(newobj(cls, args, kwargs));
          break;
        }
        case 'b': {  // BUILD
          PyValue* state = pop();
          build(top(), state);
          break;
        }
        case 'Q': {  // BINPERSID
          PyValue* pid = pop();
          push(persistent_load(pid));
          break;
        }

        case 0x82:
        case 0x83:
        case 0x84: bad("opcode EXT{} (the copyreg extension registry) is not accepted", op_ == 0x84 ? 4 : op_ - 0x81);
        case 0x97:
        case 0x98:
          bad("opcode {} (an out-of-band buffer) is not accepted", op_ == 0x97 ? "NEXT_BUFFER" : "READONLY_BUFFER");
        case 'i':
        case 'o': bad("opcode {} (protocol 0/1 instance creation, which calls a class) is not accepted",
                      op_ == 'i' ? "INST" : "OBJ");
        case 'I':
        case 'L':
        case 'F':
        case 'S':
        case 'V':
        case 'g':
        case 'p':
        case 'P':
          bad("opcode '{}' of the text protocol 0 is not accepted; PyTorch checkpoints are pickled with protocol 2 or "
              "later",
              static_cast<char>(op_));
        default: bad("unknown pickle opcode 0x{:02x} (not a pickle, or corrupt)", op_);
      }
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    fail_input("{}: data.pkl, byte {}: {}", ck_.where(), op_pos_, fmt::format(f, std::forward<Args>(args)...));
  }

  // -- Reading the pickle's bytes
  std::string_view take(uint64_t n) {
    if (n > data_.size() - pos_)
      bad("opcode 0x{:02x} needs {} more bytes, but the pickle ends after {} (truncated?)", op_, n, data_.size() - pos_);
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint64_t uint_le(int n) {
    const std::string_view b = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[static_cast<size_t>(i)]);
    return v;
  }
  // A little-endian two's complement integer of n bytes (LONG1/LONG4), which must fit in 64 bits.
  int64_t read_long(uint64_t n) {
    const std::string_view b = take(n);
    if (n == 0) return 0;
    const bool negative = static_cast<uint8_t>(b[n - 1]) & 0x80;
    uint64_t v = negative ? ~uint64_t{0} : 0;
    for (uint64_t i = std::min<uint64_t>(n, 8); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    if (n > 8) {
      const bool high_sign = (v >> 63) != 0;
      bool fits = high_sign == negative;
      for (uint64_t i = 8; i < n && fits; ++i) fits = static_cast<uint8_t>(b[i]) == (negative ? 0xff : 0x00);
      if (!fits) bad("an integer of {} bytes that does not fit in 64 bits", n);
    } else if (n < 8 && !negative) {
      v &= (uint64_t{1} << (8 * n)) - 1;
    }
    return static_cast<int64_t>(v);
  }
  // A GLOBAL's module or name: up to a newline, at most 256 characters.
  std::string line() {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos || end - pos_ > 256) bad("GLOBAL without a name line of at most 256 characters");
    std::string s(data_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  // -- Values and their budget
  PyValue* make(Kind kind) {
    if (ck_.values.size() >= Limits::max_values)
      bad("the pickle builds more than {} values, more than any checkpoint holds", Limits::max_values);
    PyValue& v = ck_.values.emplace_back();
    v.kind = kind;
    return &v;
  }
  template <typename It>
  void add_items(PyValue* container, It begin, It end) {
    const auto n = static_cast<size_t>(std::distance(begin, end));
    if (n > Limits::max_items - items_)
      bad("the pickle's containers hold more than {} items, more than any checkpoint holds", Limits::max_items);
    items_ += n;
    container->items.insert(container->items.end(), begin, end);
  }
  void charge_bytes(uint64_t n) {
    // Strings are copies of the pickle's bytes (or, for _codecs.encode, shorter): twice the pickle bounds them all.
    if (n > 2 * data_.size() + 4096 - text_bytes_) bad("the pickle's strings add up to more than twice its size");
    text_bytes_ += n;
  }
  void push_text(Kind kind, uint64_t n) {
    const std::string_view s = take(n);
    charge_bytes(n);
    PyValue* v = make(kind);
    v->text.assign(s);
    push(v);
  }
  void push_int(int64_t i) {
    PyValue* v = make(Kind::integer);
    v->integer = i;
    push(v);
  }

  // -- The stack: values above the innermost MARK are the current frame, as in Python's unpickler
  size_t frame_size() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  void push(PyValue* v) {
    if (stack_.size() >= Limits::max_stack) bad("more than {} values on the stack", Limits::max_stack);
    stack_.push_back(v);
  }
  PyValue* pop() {
    if (frame_size() == 0) bad("opcode 0x{:02x} needs a value, but the stack is empty (stack underflow)", op_);
    PyValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PyValue* top() {
    if (frame_size() == 0) bad("opcode 0x{:02x} needs a value, but the stack is empty (stack underflow)", op_);
    return stack_.back();
  }
  PyValue* expect_top(Kind kind, std::string_view op) {
    PyValue* v = top();
    if (v->kind != kind) bad("{} on a {}, not a {}", op, v->describe(), kind_name(kind));
    return v;
  }
  // The container an APPENDS / SETITEMS / ADDITEMS fills: the value just below its (popped) mark.
  PyValue* below_mark(size_t mark, Kind kind, std::string_view op) {
    if (mark <= (marks_.empty() ? 0 : marks_.back()))
      bad("{} has no {} below its MARK (stack underflow)", op, kind_name(kind));
    PyValue* v = stack_[mark - 1];
    if (v->kind != kind) bad("{} on a {}, not a {}", op, v->describe(), kind_name(kind));
    return v;
  }
  size_t pop_mark_position() {
    if (marks_.empty()) bad("opcode 0x{:02x} needs a MARK, but none is open", op_);
    const size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }
  void pop_mark() { stack_.resize(pop_mark_position()); }
  void take_mark(PyValue* container) {
    const size_t mark = pop_mark_position();
    add_items(container, stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
  }

  // -- The memo
  void memo_put(uint64_t index) {
    PyValue* v = top();
    if (memo_.size() >= Limits::max_values && !memo_.count(index))
      bad("the memo holds more than {} values", Limits::max_values);
    memo_[index] = v;
  }
  void memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) bad("memo index {} was never stored (out of range)", index);
    push(it->second);
  }

  // -- Globals and what may be done with them
  PyValue* global(std::string module, const std::string& name) {
    if (module == "__builtin__") module = "builtins";  // protocol 2 writes Python 2's module names
    if (module == "copy_reg") module = "copyreg";
    const std::string full = module + "." + name;
    const std::optional<Global> g = resolve(module, name);
    if (!g)
      bad("the pickle names the global '{}', which a checkpoint reader does not allow (only tensors, storages, "
          "OrderedDict, set, torch.Size, classes of ultralytics.nn and torch.nn.modules, and a few inert values: "
          "see core/torch_checkpoint.h)",
          excerpt(full));
    charge_bytes(full.size());
    PyValue* v = make(Kind::global);
    v->integer = static_cast<int64_t>(*g);
    v->text = full;
    return v;
  }
  static std::optional<Global> global_of(const PyValue* v) {
    if (v->kind != Kind::global) return std::nullopt;
    return static_cast<Global>(v->integer);
  }
  static bool is_text(const PyValue* v) { return v->kind == Kind::string; }

  PyValue* reduce(PyValue* callable, PyValue* args) {
    const std::optional<Global> g = global_of(callable);
    if (!g) bad("REDUCE calls a {}, which is not callable here", callable->describe());
    if (args->kind != Kind::tuple)
      bad("REDUCE of {} with a {} as its arguments, not a tuple", excerpt(callable->text), args->describe());
    const auto& a = args->items;
    const auto refuse = [&](std::string_view why) -> PyValue* {
      bad("REDUCE of {} {}: refused (nothing is called while reading a checkpoint)", excerpt(callable->text), why);
    };
    switch (*g) {
      case Global::rebuild_tensor: return rebuild_tensor(a);
      case Global::rebuild_parameter:
      case Global::rebuild_parameter_with_state:
        if (a.size() != (*g == Global::rebuild_parameter ? 3u : 4u) || a[0]->kind != Kind::tensor)
          return refuse("with arguments other than (tensor, requires_grad, hooks[, state])");
        return a[0];
      case Global::ordered_dict: {
        PyValue* d = make(Kind::dict);
        if (a.empty()) return d;
        if (a.size() != 1 || (a[0]->kind != Kind::list && a[0]->kind != Kind::tuple))
          return refuse("with arguments other than () or (list of pairs,)");
        for (PyValue* pair : a[0]->items) {
          if ((pair->kind != Kind::tuple && pair->kind != Kind::list) || pair->items.size() != 2)
            return refuse("with an item that is not a (key, value) pair");
          add_items(d, pair->items.begin(), pair->items.end());
        }
        return d;
      }
      case Global::set:
      case Global::frozenset: {
        PyValue* s = make(Kind::set);
        if (a.empty()) return s;
        if (a.size() != 1 || (a[0]->kind != Kind::list && a[0]->kind != Kind::tuple && a[0]->kind != Kind::set))
          return refuse("with arguments other than () or (list,)");
        add_items(s, a[0]->items.begin(), a[0]->items.end());
        return s;
      }
      case Global::torch_size: {
        if (a.size() != 1 || a[0]->kind != Kind::tuple ||
            !std::all_of(a[0]->items.begin(), a[0]->items.end(),
                         [](const PyValue* d) { return d->kind == Kind::integer; }))
          return refuse("with arguments other than (tuple of ints,)");
        PyValue* t = make(Kind::tuple);
        add_items(t, a[0]->items.begin(), a[0]->items.end());
        return t;
      }
      case Global::module_class:
        if (!a.empty()) return refuse("with arguments (a class is only made empty, its state set by BUILD)");
        return object(callable);
      case Global::path: {
        if (!std::all_of(a.begin(), a.end(), is_text)) return refuse("with arguments other than strings");
        std::string joined;
        for (const PyValue* part : a) {
          if (!joined.empty() && joined.back() != '/') joined += '/';
          joined += part->text;
        }
        charge_bytes(joined.size());
        PyValue* s = make(Kind::string);
        s->text = std::move(joined);
        return s;
      }
      case Global::codecs_encode: {
        if (a.size() != 2 || !is_text(a[0]) || !is_text(a[1]) ||
            (a[1]->text != "latin1" && a[1]->text != "latin-1" && a[1]->text != "iso-8859-1"))
          return refuse("with arguments other than (str, 'latin1')");
        PyValue* b = make(Kind::bytes);
        b->text = latin1(a[0]->text);
        charge_bytes(b->text.size());
        return b;
      }
      case Global::numpy_scalar:
        if (a.empty() || a[0]->kind != Kind::opaque) return refuse("with arguments other than (dtype, data)");
        return placeholder("numpy scalar");
      case Global::numpy_reconstruct:
        if (a.empty() || global_of(a[0]) != Global::numpy_ndarray)
          return refuse("with arguments other than (numpy.ndarray, shape, dtype)");
        return placeholder("numpy array");
      case Global::numpy_dtype:
        if (a.empty() || !is_text(a[0])) return refuse("with arguments other than (str, align, copy)");
        return placeholder("numpy dtype");
      case Global::getattr_:
        if (a.size() != 2 || a[0]->kind != Kind::object || !is_text(a[1]))
          return refuse("with arguments other than (object, name): only a bound method of a module is accepted");
        return placeholder(fmt::format("bound method {}.{}", a[0]->text, excerpt(a[1]->text)));
      case Global::storage_type:
      case Global::dtype:
      case Global::numpy_ndarray: return refuse("(not callable here)");
    }
    return refuse("(not callable here)");
  }

  PyValue* newobj(PyValue* cls, PyValue* args, PyValue* kwargs) {
    if (global_of(cls) != Global::module_class)
      bad("NEWOBJ of a {}: only classes of ultralytics.nn and torch.nn.modules (and IterableSimpleNamespace) are made",
          cls->describe());
    if (args->kind != Kind::tuple || !args->items.empty() ||
        (kwargs && (kwargs->kind != Kind::dict || !kwargs->items.empty())))
      bad("NEWOBJ of {} with arguments: a class is only made empty, its state set by BUILD", excerpt(cls->text));
    return object(cls);
  }

  PyValue* object(const PyValue* cls) {
    PyValue* o = make(Kind::object);
    o->text = cls->text;
    charge_bytes(o->text.size());
    return o;
  }

  PyValue* placeholder(std::string what) {
    charge_bytes(what.size());
    PyValue* p = make(Kind::opaque);
    p->text = std::move(what);
    return p;
  }

  void build(PyValue* target, PyValue* state) {
    switch (target->kind) {
      case Kind::object:
      case Kind::opaque: target->state = state; return;  // kept, never interpreted for placeholders
      case Kind::dict: return;  // an OrderedDict's instance attributes (a state_dict's _metadata): not needed
      default: bad("BUILD on a {}: only objects of allowed classes take a state", target->describe());
    }
  }

  // The bytes of a str whose code points are all below 256 (latin-1), as _codecs.encode(s, "latin1").
  std::string latin1(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<uint8_t>(s[i]);
      if (c < 0x80) {
        out += static_cast<char>(c);
        i += 1;
      } else if ((c & 0xe0) == 0xc0 && i + 1 < s.size() && (static_cast<uint8_t>(s[i + 1]) & 0xc0) == 0x80) {
        const unsigned cp = ((c & 0x1fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3fu);
        if (cp > 0xff) bad("_codecs.encode of a character U+{:04X}, which latin-1 cannot hold", cp);
        out += static_cast<char>(cp);
        i += 2;
      } else {
        bad("_codecs.encode of a string that is not latin-1 text in UTF-8");
      }
    }
    return out;
  }

  // ('storage', torch.<T>Storage, key, location, numel): a reference to the archive's data/<key>.
  PyValue* persistent_load(PyValue* pid) {
    const auto& p = pid->items;
    if (pid->kind != Kind::tuple || p.size() != 5 || !is_text(p[0]) || p[0]->text != "storage" ||
        global_of(p[1]) != Global::storage_type || !is_text(p[2]) || !is_text(p[3]) || p[4]->kind != Kind::integer)
      bad("a persistent id that is not ('storage', torch.<T>Storage, key, location, numel) but a {}", pid->describe());
    const std::string& key = p[2]->text;
    const bool key_ok = !key.empty() && key.size() <= 128 && key != "." && key != ".." &&
                        std::all_of(key.begin(), key.end(), [](char c) {
                          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                 c == '_' || c == '-' || c == '.';
                        });
    if (!key_ok) bad("storage key '{}' is not a plain name", excerpt(key));
    const std::string type_name = p[1]->text.substr(p[1]->text.rfind('.') + 1);
    const StorageType* type = storage_type(type_name);
    const size_t index = ck_.storage(key);
    const uint64_t nbytes = ck_.storages[index].nbytes;
    const int64_t numel = p[4]->integer;
    uint64_t claimed = 0;
    if (numel < 0 || __builtin_mul_overflow(static_cast<uint64_t>(numel), type->element_size, &claimed) ||
        claimed != nbytes)
      bad("storage '{}' claims {} {} elements, but its entry holds {} bytes", excerpt(key), numel, type->torch_dtype,
          nbytes);
    PyValue* s = make(Kind::storage);
    s->integer = static_cast<int64_t>(index);
    s->text = type_name;
    return s;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]).
  PyValue* rebuild_tensor(const std::vector<PyValue*>& a) {
    const auto ints = [](const PyValue* t) {
      return (t->kind == Kind::tuple || t->kind == Kind::list) &&
             std::all_of(t->items.begin(), t->items.end(), [](const PyValue* d) { return d->kind == Kind::integer; });
    };
    if ((a.size() != 6 && a.size() != 7) || a[0]->kind != Kind::storage || a[1]->kind != Kind::integer || !ints(a[2]) ||
        !ints(a[3]))
      bad("_rebuild_tensor_v2 with arguments other than (storage, offset, size, stride, requires_grad, hooks)");
    const StorageType* type = storage_type(a[0]->text);
    TorchTensorInfo info;
    info.storage = a[0]->integer;
    info.torch_dtype = type->torch_dtype;
    info.offset = a[1]->integer;
    for (const PyValue* d : a[2]->items) info.sizes.push_back(d->integer);
    for (const PyValue* d : a[3]->items) info.strides.push_back(d->integer);
    if (info.sizes.size() != info.strides.size() || info.sizes.size() > Limits::max_rank)
      bad("a tensor with {} sizes and {} strides (at most {} dimensions)", info.sizes.size(), info.strides.size(),
          Limits::max_rank);
    const StorageEntry& storage = ck_.storages[static_cast<size_t>(info.storage)];
    const auto storage_numel = static_cast<int64_t>(storage.nbytes / type->element_size);
    const auto what = [&] {
      return fmt::format("a {} tensor of size ({}) and stride ({}) at offset {} in storage '{}' of {} elements",
                         info.torch_dtype, fmt::join(info.sizes, ", "), fmt::join(info.strides, ", "), info.offset,
                         excerpt(storage.key), storage_numel);
    };
    int64_t numel = 1, last = info.offset;
    bool overflow = info.offset < 0;
    for (size_t i = 0; i < info.sizes.size() && !overflow; ++i) {
      const int64_t size = info.sizes[i], stride = info.strides[i];
      if (size < 0 || stride < 0) overflow = true;
      else if (__builtin_mul_overflow(numel, size, &numel)) overflow = true;
      else if (size > 0) {
        int64_t step = 0;
        overflow = __builtin_mul_overflow(size - 1, stride, &step) || __builtin_add_overflow(last, step, &last);
      }
    }
    if (overflow) bad("{}: a negative or overflowing size, stride or offset", what());
    if (numel > 0 ? last >= storage_numel : info.offset > storage_numel) bad("{}: it reaches outside its storage", what());
    ck_.tensors.push_back(std::move(info));
    PyValue* t = make(Kind::tensor);
    t->integer = static_cast<int64_t>(ck_.tensors.size() - 1);
    return t;
  }

  std::string_view data_;
  TorchCheckpoint::Impl& ck_;
  size_t pos_ = 0, op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<PyValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyValue*> memo_;
  size_t items_ = 0;
  uint64_t text_bytes_ = 0;
};

}  // namespace

// ---- TorchCheckpoint ---------------------------------------------------------------------------------------------

TorchCheckpoint::TorchCheckpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchCheckpoint::TorchCheckpoint(TorchCheckpoint&&) noexcept = default;
TorchCheckpoint& TorchCheckpoint::operator=(TorchCheckpoint&&) noexcept = default;
TorchCheckpoint::~TorchCheckpoint() = default;

const fs::path& TorchCheckpoint::path() const { return impl_->path; }
const PyValue& TorchCheckpoint::root() const { return *impl_->root; }
std::string TorchCheckpoint::where() const { return impl_->where(); }

TorchCheckpoint TorchCheckpoint::read(const fs::path& path) {
  auto impl = std::make_unique<Impl>();
  Impl& ck = *impl;
  ck.path = path;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) fail_input("{}: file not found", ck.where());
    fail_input("{}: cannot open: {}", ck.where(), std::strerror(err));
  }
  VISION_CHECK_INPUT(S_ISREG(st.st_mode), "{}: is {}, not a regular file", ck.where(),
               S_ISDIR(st.st_mode) ? "a directory" : "a special file");
  ck.file_size = static_cast<uint64_t>(st.st_size);

  int err = 0;
  ck.zip.reset(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err));
  VISION_CHECK_INPUT(ck.zip != nullptr,
               "{}: not a readable zip archive ({}); a PyTorch checkpoint is the zip archive torch.save writes "
               "(truncated or corrupt file?)",
               ck.where(), zip_error_text(err));
  const zip_int64_t n = zip_get_num_entries(ck.zip.get(), 0);
  VISION_CHECK_INPUT(n >= 0 && static_cast<uint64_t>(n) <= Limits::max_entries, "{}: the archive has {} entries (at most {})",
               ck.where(), n, Limits::max_entries);

  // data.pkl in the one top folder, whatever its name.
  std::vector<std::pair<std::string, zip_uint64_t>> pickles;
  std::vector<std::string> some_names;
  for (zip_uint64_t i = 0; i < static_cast<zip_uint64_t>(n); ++i) {
    const char* name = zip_get_name(ck.zip.get(), i, ZIP_FL_ENC_RAW);
    if (!name) continue;
    const std::string_view s(name);
    if (some_names.size() < 4) some_names.push_back(excerpt(s));
    constexpr std::string_view kPickle = "/data.pkl";
    if (s.size() > kPickle.size() && s.ends_with(kPickle)) {
      const std::string_view folder = s.substr(0, s.size() - kPickle.size());
      if (folder.find('/') == std::string_view::npos) pickles.emplace_back(std::string(folder), i);
    }
  }
  VISION_CHECK_INPUT(!pickles.empty(),
               "{}: the zip archive has no <folder>/data.pkl, so it is no PyTorch checkpoint (its first entries: {})",
               ck.where(), some_names.empty() ? std::string("none") : fmt::format("{}", fmt::join(some_names, ", ")));
  VISION_CHECK_INPUT(pickles.size() == 1, "{}: the zip archive has {} data.pkl entries ({}/data.pkl, {}/data.pkl, …): which "
               "one is the checkpoint?",
               ck.where(), pickles.size(), excerpt(pickles[0].first), excerpt(pickles[1].first));
  ck.folder = pickles[0].first;

  // Storages are used as stored: a big-endian checkpoint (its byteorder entry says so) is refused.
  const std::string byteorder_name = ck.folder + "/byteorder";
  if (const zip_int64_t bo = zip_name_locate(ck.zip.get(), byteorder_name.c_str(), ZIP_FL_ENC_RAW); bo >= 0) {
    const uint64_t size = ck.entry_size(static_cast<zip_uint64_t>(bo), byteorder_name);
    VISION_CHECK_INPUT(size <= 16, "{}: the byteorder entry has {} bytes", ck.where(), size);
    std::string order(size, '\0');
    ck.read_entry(static_cast<zip_uint64_t>(bo), byteorder_name, order.data(), size);
    VISION_CHECK_INPUT(order == "little", "{}: the checkpoint's byte order is '{}'; only little-endian checkpoints are read",
                 ck.where(), excerpt(order));
  }

  const std::string pickle_name = ck.folder + "/data.pkl";
  const uint64_t size = ck.entry_size(pickles[0].second, pickle_name);
  VISION_CHECK_INPUT(size <= Limits::max_pickle_bytes, "{}: data.pkl has {} bytes, more than the {} a checkpoint may have",
               ck.where(), size, Limits::max_pickle_bytes);
  std::string pickle(size, '\0');
  ck.read_entry(pickles[0].second, pickle_name, pickle.data(), size);
  ck.root = Unpickler(pickle, ck).load();
  return TorchCheckpoint(std::move(impl));
}

TorchCheckpoint TorchCheckpoint::from_pickle(std::string pickle,
                                             std::vector<std::pair<std::string, std::string>> storages,
                                             const std::string& name) {
  auto impl = std::make_unique<Impl>();
  Impl& ck = *impl;
  ck.path = name;
  for (auto& [key, bytes] : storages) {
    StorageEntry s;
    s.key = key;
    s.nbytes = bytes.size();
    s.memory = std::move(bytes);
    if (ck.storage_by_key.emplace(key, ck.storages.size()).second) ck.storages.push_back(std::move(s));
  }
  VISION_CHECK_INPUT(pickle.size() <= Limits::max_pickle_bytes, "{}: the pickle has {} bytes, more than the {} allowed",
               ck.where(), pickle.size(), Limits::max_pickle_bytes);
  ck.root = Unpickler(pickle, ck).load();
  return TorchCheckpoint(std::move(impl));
}

const TorchTensorInfo& TorchCheckpoint::tensor_info(const PyValue& tensor) const {
  VISION_CHECK_INPUT(tensor.kind == Kind::tensor && tensor.integer >= 0 &&
                   static_cast<size_t>(tensor.integer) < impl_->tensors.size(),
               "{}: a {} where a tensor was expected", where(), tensor.describe());
  return impl_->tensors[static_cast<size_t>(tensor.integer)];
}

Tensor TorchCheckpoint::tensor(const PyValue& value, std::string_view name) const {
  VISION_CHECK_INPUT(value.kind == Kind::tensor, "{}: '{}' is a {}, not a tensor", where(), name, value.describe());
  const TorchTensorInfo& info = tensor_info(value);
  const StorageType* type = nullptr;
  for (const StorageType& t : kStorageTypes)
    if (t.torch_dtype == info.torch_dtype) type = &t;
  VISION_CHECK_INPUT(type && type->dtype, "{}: tensor '{}' is torch.{}, a type the engine does not read (float32, float16, "
               "bfloat16, int64, int32, uint8 and bool are read)",
               where(), name, info.torch_dtype);
  const DType dtype = *type->dtype;
  const size_t element = dtype_size(dtype);
  const StorageEntry& storage = impl_->storages[static_cast<size_t>(info.storage)];
  int64_t numel = 1;
  for (int64_t s : info.sizes) numel *= s;  // checked for overflow when the pickle was read
  VISION_CHECK_INPUT(static_cast<uint64_t>(numel) * element <= storage.nbytes,
               "{}: tensor '{}' has {} elements, more than its storage '{}' holds (an expanded view), which is not read",
               where(), name, numel, storage.key);
  const std::byte* base = impl_->storage_data(static_cast<size_t>(info.storage));
  const Shape shape(info.sizes);

  bool contiguous = true;
  int64_t expected = 1;
  for (size_t i = info.sizes.size(); i-- > 0;) {
    if (info.sizes[i] != 1 && info.strides[i] != expected) contiguous = false;
    expected *= info.sizes[i];
  }
  Tensor t;
  if (contiguous) {
    const std::byte* p = base + static_cast<size_t>(info.offset) * element;
    t = Tensor::wrap(impl_->storages[static_cast<size_t>(info.storage)].data, const_cast<std::byte*>(p), shape, dtype,
                     Device::cpu);
  } else {  // a strided view: gathered element by element (each index·stride is within the checked extent)
    t = Tensor::zeros(shape, dtype);
    auto* out = static_cast<std::byte*>(t.raw());
    const size_t rank = info.sizes.size();
    std::vector<int64_t> index(rank, 0);
    for (int64_t n = 0; n < numel; ++n) {
      int64_t at = info.offset;
      for (size_t d = 0; d < rank; ++d) at += index[d] * info.strides[d];
      std::memcpy(out + static_cast<size_t>(n) * element, base + static_cast<size_t>(at) * element, element);
      for (size_t d = rank; d-- > 0;) {  // the next multi-index, row-major
        if (++index[d] < info.sizes[d]) break;
        index[d] = 0;
      }
    }
  }
  if (dtype == DType::boolean) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i)
      VISION_CHECK_INPUT(p[i] <= 1, "{}: bool tensor '{}' holds {} at element {} (only 0 or 1)", where(), name,
                   static_cast<int>(p[i]), i);
  }
  return t;
}

}  // namespace vision::core
