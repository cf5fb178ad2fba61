#include "base/dtype.h"

namespace sy {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::U8: case DType::I8: case DType::Bool: case DType::F8E4M3: return 1;
    case DType::Undefined: case DType::String: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::U8: return "uint8";
    case DType::I8: return "int8";
    case DType::U16: return "uint16";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::String: return "string";
    case DType::Bool: return "bool";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
    case DType::U32: return "uint32";
    case DType::U64: return "uint64";
    case DType::BF16: return "bfloat16";
    case DType::F8E4M3: return "float8e4m3fn";
    case DType::Undefined: return "undefined";
  }
  return "unknown";
}

bool dtype_is_known(int32_t code) {
  return (code >= 1 && code <= 13) || code == 16 || code == 17;
}

}  // namespace sy
