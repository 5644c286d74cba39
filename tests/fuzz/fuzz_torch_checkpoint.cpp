// libFuzzer target: the PyTorch checkpoint reader (core::TorchCheckpoint: libzip, the restricted unpickler, tensors
// against their storages) and the ultralytics weights walk (models::yolo::ultralytics_weights) on hostile input. An
// input starting "PK" is a zip archive on disk (TorchCheckpoint::read); any other input is a bare data.pkl given one
// 4096-byte storage per storage type, named "s<Type>Storage" (TorchCheckpoint::from_pickle), so that mutations reach
// the unpickler without a zip CRC in their way. Every tensor the walk returns must lie within the input's bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "vision/core/error.h"
#include "vision/core/torch_checkpoint.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"

namespace {

constexpr size_t kStorageBytes = 4096;

std::vector<std::pair<std::string, std::string>> storages() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* type : {"HalfStorage", "FloatStorage", "BFloat16Storage", "DoubleStorage", "LongStorage",
                           "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage",
                           "ComplexFloatStorage", "ComplexDoubleStorage", "UntypedStorage"})
    out.emplace_back(std::string("s") + type, std::string(kStorageBytes, '\x01'));
  return out;
}

void check(const vision::core::TorchCheckpoint& ck, size_t limit) {
  try {
    const vision::core::SafetensorsFile file = vision::models::yolo::ultralytics_weights(ck);
    for (const auto& [name, t] : file.tensors)
      if (t.nbytes() > limit) __builtin_trap();  // a tensor larger than its storage could be
  } catch (const vision::Error&) {
  }
  // A root that is a tensor, or a dict's tensors: materialized too.
  const vision::core::PyValue& root = ck.root();
  std::vector<const vision::core::PyValue*> values = {&root};
  if (root.kind == vision::core::PyValue::Kind::dict)
    for (size_t i = 1; i < root.items.size() && values.size() < 64; i += 2) values.push_back(root.items[i]);
  for (const vision::core::PyValue* v : values) {
    if (v->kind != vision::core::PyValue::Kind::tensor) continue;
    try {
      if (ck.tensor(*v, "t").nbytes() > limit) __builtin_trap();
    } catch (const vision::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
      const std::string path = vision::fuzz::input_file(data, size, ".pt");
      if (path.empty()) return 0;
      // A stored storage is at most the file; a deflated one at most 1032 times its compressed bytes.
      check(vision::core::TorchCheckpoint::read(path), 1032 * size + 64);
    } else {
      static const std::vector<std::pair<std::string, std::string>> given = storages();
      check(vision::core::TorchCheckpoint::from_pickle(bytes, given, "fuzz.pkl"), kStorageBytes);
    }
  } catch (const vision::Error&) {
  }
  return 0;
}
