// IEEE float16 and bfloat16 <-> float32, round to nearest even: Cast on the
// CPU, and the weights a GPU kernel converts once at load.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sy {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
void floats_to_bf16(const float* src, uint16_t* dst, size_t n);
void floats_to_half(const float* src, uint16_t* dst, size_t n);

}  // namespace sy
