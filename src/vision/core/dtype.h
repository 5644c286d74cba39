// DType — element types of tensors (f32, f16, bf16, i32, i64, u8, boolean) and their properties.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vision::core {

// boolean: one byte per element, 0 or 1 (masks). Integer and boolean values never carry a gradient.
enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, boolean };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Short lower-case name: "f32", "bf16", ... (used in kernel ids and messages).
std::string_view dtype_name(DType t);
// Parses dtype_name() output; throws vision::Error for anything else.
DType parse_dtype(std::string_view name);
// safetensors spelling: "F32", "F16", "BF16", "I32", "I64", "U8".
std::string_view safetensors_dtype_name(DType t);
// Returns false (and leaves *out unchanged) for a dtype the engine does not know.
bool parse_safetensors_dtype(std::string_view name, DType* out);

template <typename T>
constexpr DType dtype_of() {
  static_assert(sizeof(T) == 0, "no DType for this C++ type (f16/bf16 data is accessed as uint16_t)");
  return DType::f32;
}
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// IEEE half / bfloat16 conversions on the host (round to nearest even).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

}  // namespace vision::core
