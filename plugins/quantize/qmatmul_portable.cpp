// Non-x86 builds: the SIMD entry points exist but are never selected
// (isa_available() is false for them); they run the scalar code.
#include <stdexcept>

#include "qmatmul.h"

namespace sy_quant {

void gemv_avx2(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  gemv_scalar(w, x, xsum, y, n0, n1);
}
void gemv_avx512(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  gemv_scalar(w, x, xsum, y, n0, n1);
}
void dequantize_rows_avx512(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) { dequantize_rows(w, n0, n1, out); }
void dequantize_rows_avx2(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) { dequantize_rows(w, n0, n1, out); }
void quantize_activation(const PackedMatrix&, const float*, QuantizedActivation&) {
  throw std::logic_error("the VNNI path does not exist on this CPU");
}
void quantize_activation_avx2(const PackedMatrix&, const float*, QuantizedActivation&) {
  throw std::logic_error("the AVX2 int8 path does not exist on this CPU");
}
void gemv_avx2_int8(const PackedMatrix&, const QuantizedActivation*, int64_t, float*, int64_t, int64_t, int64_t) {
  throw std::logic_error("the AVX2 int8 path does not exist on this CPU");
}
void gemm_avx2_int4(const PackedMatrix&, const QuantizedActivation*, int64_t, float*, int64_t, int64_t) {
  throw std::logic_error("the AVX2 int8 path does not exist on this CPU");
}
void gemm_avx512vnni(const PackedMatrix&, const QuantizedActivation*, int64_t, float*, int64_t, int64_t) {
  throw std::logic_error("the VNNI path does not exist on this CPU");
}
void gemm_amx(const PackedMatrix&, const QuantizedActivation*, int64_t, float*, int64_t, int64_t) {
  throw std::logic_error("the AMX path does not exist on this CPU");
}
bool amx_granted() { return false; }
void gemv_avx512vnni(const PackedMatrix&, const QuantizedActivation&, float*, int64_t, int64_t) {
  throw std::logic_error("the VNNI path does not exist on this CPU");
}

}  // namespace sy_quant
