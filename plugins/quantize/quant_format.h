// The stored form of a quantized weight, shared by the quantize pass, the
// kernels and the tests. It is ONNX Runtime's com.microsoft::MatMulNBits
// layout, so models quantized by ORT's tools load as they are and models
// written by `switchyard optimize` stay readable by other runtimes:
//
//   W [K, N] (fp32, MatMul's B) is stored transposed, row n = output channel,
//   cut along K into n_blocks = ceil(K / block_size) blocks:
//   codes        uint8 [N, n_blocks, block_size * bits / 8]
//                4-bit: element k of a block in byte k/2, even k in the low nibble
//   scales       float [N * n_blocks]
//   zero_points  uint8 [N * ceil(n_blocks * bits / 8)], 4-bit packed like the
//                codes; absent = symmetric, zero point 2^(bits-1); or float
//                [N * n_blocks] (ORT allows the scales' type): a GGUF Q4_1
//                block's min m as zp = -m / scale
//   w[k][n] = (code - zero_point) * scale
//
// Per-output-channel int8 is the same with block_size = K (one block per row).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sy_quant {

struct QuantSpec {
  int bits = 8;              // 4 or 8
  int64_t block_size = 0;    // 0: per output channel (one block of K)
  bool symmetric = true;
  // "-min": each group's own minimum as a float zero point (-min / scale),
  // the range min..max without forcing zero into it (GGUF's Q4_1 and
  // K-quants' form); needs symmetric = false.
  bool float_min = false;
};

struct QuantizedWeight {
  int bits = 8;
  int64_t K = 0, N = 0, block_size = 0, n_blocks = 0;
  std::vector<uint8_t> codes;        // [N, n_blocks, block_size * bits / 8]
  std::vector<float> scales;         // [N * n_blocks]
  std::vector<uint8_t> zero_points;  // empty when symmetric
  std::vector<float> float_zero_points;  // [N * n_blocks], instead of zero_points
  bool symmetric() const { return zero_points.empty() && float_zero_points.empty(); }
  int64_t blob_bytes() const { return block_size * bits / 8; }
  int64_t zero_point_row_bytes() const { return (n_blocks * bits + 7) / 8; }
};

// Quantizes W [K, N] row-major (MatMul's B). Round to nearest; symmetric
// schemes use codes 2^(b-1) +- (2^(b-1) - 1), asymmetric ones min..max with
// zero exactly representable. Grouped schemes' scales are fp16 values (held
// in floats), so the kernels can store them in half the bytes.
QuantizedWeight quantize(const float* w, int64_t K, int64_t N, const QuantSpec& spec);

// Code and zero point of element (n, k), straight from the stored layout.
int code_at(const QuantizedWeight& q, int64_t n, int64_t k);
int zero_point_at(const QuantizedWeight& q, int64_t n, int64_t block);
// The zero point as a float: a float zero point, else zero_point_at.
float zero_point_value(const QuantizedWeight& q, int64_t n, int64_t block);

// The fp32 weight the codes stand for, as W [K, N] (the test reference).
std::vector<float> dequantize(const QuantizedWeight& q);

// Parses "int8", "int8-asym", "int4", "int4:64", "int4-asym:128", "int8:32",
// "int4-min" (asymmetric with float minimums);
// int4 without ':G' takes default_group. Throws on anything else.
QuantSpec parse_scheme(const std::string& scheme, int64_t default_group);
std::string scheme_name(const QuantSpec& spec);

}  // namespace sy_quant
