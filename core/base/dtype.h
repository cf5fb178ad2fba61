// Element types. The numeric values are ONNX's TensorProto.DataType codes so
// import and the plugin ABI need no translation table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace sy {

enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  String = 8,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
  F8E4M3 = 17,  // float8 e4m3fn: quantized KV caches only
};

size_t dtype_size(DType t);       // 0 for Undefined/String
const char* dtype_name(DType t);  // "float32", "int64", ...
bool dtype_is_known(int32_t code);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::I8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

}  // namespace sy
