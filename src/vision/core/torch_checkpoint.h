// PyTorch checkpoints (.pt, the zip archive torch.save writes since PyTorch 1.6) read without PyTorch and without
// running any code of theirs: the archive through libzip, its data.pkl through a restricted unpickler that builds
// plain values only.
//
// The archive: one top folder of any name (torch.save names it "archive" when saving to a buffer, else the file's
// stem) holding data.pkl (the pickle), data/<key> (one entry per storage: its raw little-endian bytes), version and,
// in newer files, byteorder, .data/version and data/serialization_id; entries other than data.pkl and the storages
// the pickle names are ignored. Entries must be stored or deflated; every size is checked against the entry's real
// size (and a deflated entry's claimed size against deflate's largest ratio) before anything of that size is made.
//
// The unpickler reads the opcodes of protocols 2 to 5 that PyTorch and Python write (text opcodes of protocols 0/1,
// extensions and out-of-band buffers are refused). It builds only: None, bool, int (64-bit), float, str, bytes,
// tuple, list, dict, set, tensors (views of the archive's storages, checked against them), generic objects (a class
// name and the state BUILD gave it) and inert placeholders. It never imports, calls or constructs anything of the
// pickle's choosing. The globals it accepts, and what each becomes:
//
//   torch._utils._rebuild_tensor_v2, _rebuild_parameter, _rebuild_parameter_with_state   a tensor (a parameter is its
//                                                          tensor; requires_grad and hooks are dropped)
//   torch.<T>Storage (Half, Float, BFloat16, Double, Long, Int, Short, Char, Byte, Bool, ComplexFloat,
//     ComplexDouble) and torch[.storage].UntypedStorage     storage types, only inside a storage's persistent id
//   collections.OrderedDict                               a dict (REDUCE with no arguments or a list of pairs)
//   builtins.set / frozenset (__builtin__ in protocol 2)  a set (REDUCE with no arguments or one list)
//   torch.Size                                            a tuple of ints
//   classes under ultralytics.nn.* and torch.nn.modules.*, and ultralytics.utils.IterableSimpleNamespace
//                                                          a generic object: made by NEWOBJ (or REDUCE) with no
//                                                          arguments, its state set by BUILD; never constructed
//
// and, deliberately, a few inert values that real ultralytics checkpoints hold in fields the engine never reads (so
// that refusing them would refuse real checkpoints); none of them runs anything, and each takes only the argument
// shape Python writes for it:
//
//   torch.float16, torch.float32, … (dtype names)         an opaque value naming the dtype (not callable)
//   pathlib.Path / PosixPath / WindowsPath / Pure*Path    a string: the parts joined by '/' (train_args paths)
//   _codecs.encode(str, "latin1")                         bytes: how protocol 2 pickles bytes (numpy scalars' data)
//   numpy[._core|.core].multiarray.scalar, _reconstruct, numpy.dtype, numpy.ndarray
//                                                          an opaque placeholder (numpy scalars and 0-d arrays in
//                                                          train_metrics / best_fitness; their BUILD state is kept,
//                                                          never interpreted)
//   builtins.getattr(object, str)                         an opaque placeholder for a bound method: a model saved
//                                                          after ultralytics' fuse() holds Conv.forward = forward_fuse
//
// Any other global (os.system, builtins.eval, datetime.datetime, ultralytics.utils.loss.*, …) is an error that
// names it, as soon as the pickle names it; a REDUCE, NEWOBJ or BUILD on anything outside these rules is an error
// naming the callable.
//
// Hostile input: every value lives in an arena owned by the checkpoint (no value owns another, so graphs of any depth,
// or with cycles, are built and freed without recursion); the stack, the marks, the memo, the number of values, of
// container items and of string bytes are bounded, and a pickle past a bound is refused with an error naming it.
// Tensors are checked against their storages (offset + extent within the storage, every size and stride
// non-negative, no overflow); storages against their entries (numel · element size = the entry's size). Every error
// is a vision::Error naming the file and the problem (and the pickle byte for pickle errors).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vision/core/tensor.h"

namespace vision::core {

// A value of an unpickled checkpoint. Owned by the TorchCheckpoint that made it; children are plain pointers into
// the same arena (they may be shared, and may form cycles).
struct PyValue {
  enum class Kind : uint8_t {
    none, boolean, integer, floating, string, bytes, tuple, list, dict, set,
    global,  // a global the pickle named and did not call (a dtype name, a class)
    object,  // an instance of an allowed class: `text` is its class, `state` what BUILD gave it
    tensor,  // `integer` indexes the checkpoint's tensors
    storage, // `integer` indexes the checkpoint's storages (a persistent id)
    opaque,  // an inert placeholder: `text` says what it stands for
  };
  Kind kind = Kind::none;
  bool flag = false;       // boolean
  int64_t integer = 0;     // integer; tensor / storage index; global: what it is (internal)
  double floating = 0;     // floating
  std::string text;        // string (UTF-8 as pickled), bytes; global, object, opaque: "module.name"
  std::vector<PyValue*> items;  // tuple, list, set: the elements; dict: key, value, key, value, … in pickle order
  PyValue* state = nullptr;     // object, opaque: the state BUILD set (nullptr when none)

  bool is_none() const { return kind == Kind::none; }
  // The dict's value for a string (or integer) key, the last one set when a key repeats; an object's attribute (from
  // its BUILD state when that is a dict); nullptr when absent or not a dict/object.
  const PyValue* get(std::string_view key) const;
  const PyValue* get(int64_t key) const;
  size_t dict_size() const { return kind == Kind::dict ? items.size() / 2 : 0; }
  // "dict", "str", "ultralytics.nn.tasks.DetectionModel object", … (for messages).
  std::string describe() const;
};

// A tensor of the checkpoint: a strided view of one of its storages (already checked against it).
struct TorchTensorInfo {
  int64_t storage = 0;  // index of the storage
  std::string torch_dtype;  // "float16", "float32", "int64", … (PyTorch's names)
  int64_t offset = 0;       // in elements
  std::vector<int64_t> sizes, strides;
};

class TorchCheckpoint {
 public:
  // Reads the zip archive at path and unpickles its data.pkl (the storages are read when a tensor is asked for).
  // Throws vision::Error naming the file and the problem.
  static TorchCheckpoint read(const std::filesystem::path& path);
  // The same from a pickle in memory and its storages by key (tests and fuzzing); `name` stands for the file in
  // messages.
  static TorchCheckpoint from_pickle(std::string pickle, std::vector<std::pair<std::string, std::string>> storages,
                                     const std::string& name);

  TorchCheckpoint(TorchCheckpoint&&) noexcept;
  TorchCheckpoint& operator=(TorchCheckpoint&&) noexcept;
  ~TorchCheckpoint();

  const std::filesystem::path& path() const;
  // What torch.load would return.
  const PyValue& root() const;
  const TorchTensorInfo& tensor_info(const PyValue& tensor) const;
  // The tensor as a host core::Tensor of its own dtype, row-major (a view of the storage when the tensor is
  // contiguous, else a copy). `name` is used in messages. Throws for a value that is not a tensor, a dtype the engine
  // has no type for (float64, int16, int8, complex), a tensor with more elements than its storage (an expanded view:
  // never in a state_dict), a storage whose entry cannot be read, or bool bytes other than 0/1.
  Tensor tensor(const PyValue& tensor, std::string_view name) const;

  // "PyTorch checkpoint 'PATH'" (the start of this checkpoint's messages).
  std::string where() const;

  struct Impl;  // opaque: the archive, the values, the tensors and the storages

 private:
  explicit TorchCheckpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The limits the unpickler enforces (public for tests).
struct TorchPickleLimits {
  static constexpr uint64_t max_pickle_bytes = uint64_t{1} << 28;  // data.pkl (a YOLO26n checkpoint's is 150 KB)
  static constexpr size_t max_values = size_t{1} << 21;            // values built (YOLO26x training: ~10^5)
  static constexpr size_t max_items = size_t{1} << 23;             // container elements, all containers together
  static constexpr size_t max_stack = size_t{1} << 20;             // values on the stack at once
  static constexpr size_t max_marks = size_t{1} << 12;             // open MARKs at once (the nesting of literals)
  static constexpr size_t max_rank = 16;                           // tensor dimensions
  static constexpr size_t max_entries = size_t{1} << 20;           // zip entries
};

}  // namespace vision::core
