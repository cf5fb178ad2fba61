// GGUF tensor data in the two forms the engine takes it:
//  - dequantize(): float32, exactly the values ggml's dequantize_row_* and
//    the gguf Python package give (the block formulas in float32, in the
//    same order), for every type gguf_file.h reads;
//  - to_block_quant(): the engine's block-quantized weight (ONNX Runtime's
//    MatMulNBits layout, plugins/quantize/quant_format.h) where a ggml block
//    maps onto it without requantizing: Q8_0 and Q4_0 exactly (codes moved,
//    fp16 scales kept), Q4_1 with its min carried as a float zero point
//    (w = (q - zp) * d with zp = -m / d; the kernel's -d * zp is m within
//    one rounding); Q5_0, Q5_1 and the K-quants over their own sub-blocks
//    (16 or 32 codes of 4 or 8 bits, the sub-block's scale in float32, its
//    min as a float zero point the same way).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "gguf/gguf_file.h"

namespace sy::gguf {

// The tensor as float32, GGUF element order (rows of dims[0]).
std::vector<float> dequantize(const TensorInfo& t, const std::vector<uint8_t>& raw);

// A weight of N rows (output channels) by K (dims[0]) in MatMulNBits form.
struct BlockQuant {
  int bits = 8;
  int64_t K = 0, N = 0, block_size = 32;
  std::vector<uint8_t> codes;             // [N, K / block, block * bits / 8], 4-bit: even k in the low nibble
  std::vector<float> scales;              // [N * K / block]
  std::vector<float> float_zero_points;   // [N * K / block]; empty: symmetric (zero point 2^(bits-1))
};
// nullopt when the type has no block form (F32, F16, BF16, Q8_1, Q8_K) or
// a block with scale 0 and a nonzero min (no (q - zp) * s form).
std::optional<BlockQuant> to_block_quant(const TensorInfo& t, const std::vector<uint8_t>& raw);

}  // namespace sy::gguf
