#include "quant_format.h"

#include <switchyard/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace sy_quant {

namespace {

// The smallest fp16 value >= s (s >= 0): a scale rounded up, so the block's
// largest weight still fits the code range. Beyond fp16's range, s itself
// (the kernels then keep float scales).
float half_at_least(float s) {
  if (!(s <= 65504.f)) return s;
  uint16_t h = sy::plugin::f32_to_f16(s);
  if (sy::plugin::f16_to_f32(h) < s) ++h;
  return sy::plugin::f16_to_f32(h);
}

void set_nibble_or_byte(std::vector<uint8_t>& buf, int64_t byte_base, int64_t index, int bits, int value) {
  if (bits == 8) {
    buf[static_cast<size_t>(byte_base + index)] = static_cast<uint8_t>(value);
  } else {
    uint8_t& b = buf[static_cast<size_t>(byte_base + index / 2)];
    b = static_cast<uint8_t>(index % 2 == 0 ? (b & 0xF0) | value : (b & 0x0F) | (value << 4));
  }
}

int get_nibble_or_byte(const std::vector<uint8_t>& buf, int64_t byte_base, int64_t index, int bits) {
  if (bits == 8) return buf[static_cast<size_t>(byte_base + index)];
  uint8_t b = buf[static_cast<size_t>(byte_base + index / 2)];
  return index % 2 == 0 ? (b & 0x0F) : (b >> 4);
}

}  // namespace

QuantizedWeight quantize(const float* w, int64_t K, int64_t N, const QuantSpec& spec) {
  if (spec.bits != 4 && spec.bits != 8) throw std::invalid_argument("bits must be 4 or 8");
  if (K <= 0 || N <= 0) throw std::invalid_argument("weight must be non-empty");
  QuantizedWeight q;
  q.bits = spec.bits;
  q.K = K;
  q.N = N;
  q.block_size = spec.block_size > 0 ? spec.block_size : K;
  if ((q.block_size * spec.bits) % 8 != 0) throw std::invalid_argument("block_size * bits must be a whole number of bytes");
  q.n_blocks = (K + q.block_size - 1) / q.block_size;
  q.codes.assign(static_cast<size_t>(N * q.n_blocks * q.blob_bytes()), 0);
  q.scales.assign(static_cast<size_t>(N * q.n_blocks), 0.f);
  if (spec.float_min) q.float_zero_points.assign(static_cast<size_t>(N * q.n_blocks), 0.f);
  else if (!spec.symmetric) q.zero_points.assign(static_cast<size_t>(N * q.zero_point_row_bytes()), 0);
  const int qmax = (1 << spec.bits) - 1, mid = 1 << (spec.bits - 1);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < q.n_blocks; ++b) {
      const int64_t k0 = b * q.block_size, k1 = std::min(K, k0 + q.block_size);
      float lo = 0.f, hi = 0.f;  // the range always holds zero (but for float minimums)
      if (spec.float_min) lo = hi = w[k0 * N + n];
      for (int64_t k = k0; k < k1; ++k) {
        lo = std::min(lo, w[k * N + n]);
        hi = std::max(hi, w[k * N + n]);
      }
      float scale;
      int zp;
      if (spec.float_min) {
        // w = (code - zp) * scale with zp = -lo / scale: codes 0..qmax span lo..hi.
        scale = (hi - lo) / static_cast<float>(qmax);
        if (q.n_blocks > 1) scale = half_at_least(scale);
        const float zpf = scale > 0 ? -lo / scale : 0.f;
        q.float_zero_points[static_cast<size_t>(n * q.n_blocks + b)] = zpf;
        q.scales[static_cast<size_t>(n * q.n_blocks + b)] = scale;
        const float inv = scale > 0 ? 1.f / scale : 0.f;
        const int64_t base = (n * q.n_blocks + b) * q.blob_bytes();
        for (int64_t k = k0; k < q.block_size + k0; ++k) {
          // Padding past K: the code nearest zero.
          const float v = k < k1 ? w[k * N + n] : 0.f;
          const int code = scale > 0 ? std::clamp(static_cast<int>(std::lround((v - lo) * inv)), 0, qmax) : 0;
          set_nibble_or_byte(q.codes, base, k - k0, spec.bits, code);
        }
        if (scale == 0) q.float_zero_points[static_cast<size_t>(n * q.n_blocks + b)] = 0.f, q.scales[static_cast<size_t>(n * q.n_blocks + b)] = 0.f;
        continue;
      }
      if (spec.symmetric) {
        scale = std::max(-lo, hi) / static_cast<float>(mid - 1);
        zp = mid;
      } else {
        scale = (hi - lo) / static_cast<float>(qmax);
        if (q.n_blocks > 1) scale = half_at_least(scale);
        zp = scale > 0 ? std::clamp(static_cast<int>(std::lround(-lo / scale)), 0, qmax) : mid;
        set_nibble_or_byte(q.zero_points, n * q.zero_point_row_bytes(), b, spec.bits, zp);
      }
      // Grouped scales are kept at half precision (llama.cpp's Q4_0 does
      // the same): the kernels stream 2 bytes per group instead of 4, and
      // the codes are rounded against the scale they will be read with.
      if (spec.symmetric && q.n_blocks > 1) scale = half_at_least(scale);
      q.scales[static_cast<size_t>(n * q.n_blocks + b)] = scale;
      const float inv = scale > 0 ? 1.f / scale : 0.f;
      const int64_t base = (n * q.n_blocks + b) * q.blob_bytes();
      for (int64_t k = k0; k < q.block_size + k0; ++k) {
        // Padding past K holds the zero point: it dequantizes to 0.
        int code = k < k1 ? std::clamp(static_cast<int>(std::lround(w[k * N + n] * inv)) + zp, 0, qmax) : zp;
        set_nibble_or_byte(q.codes, base, k - k0, spec.bits, code);
      }
    }
  }
  return q;
}

int code_at(const QuantizedWeight& q, int64_t n, int64_t k) {
  int64_t b = k / q.block_size;
  return get_nibble_or_byte(q.codes, (n * q.n_blocks + b) * q.blob_bytes(), k % q.block_size, q.bits);
}

int zero_point_at(const QuantizedWeight& q, int64_t n, int64_t block) {
  if (q.zero_points.empty()) return 1 << (q.bits - 1);
  return get_nibble_or_byte(q.zero_points, n * q.zero_point_row_bytes(), block, q.bits);
}

float zero_point_value(const QuantizedWeight& q, int64_t n, int64_t block) {
  if (!q.float_zero_points.empty()) return q.float_zero_points[static_cast<size_t>(n * q.n_blocks + block)];
  return static_cast<float>(zero_point_at(q, n, block));
}

std::vector<float> dequantize(const QuantizedWeight& q) {
  std::vector<float> w(static_cast<size_t>(q.K * q.N));
  for (int64_t n = 0; n < q.N; ++n)
    for (int64_t k = 0; k < q.K; ++k) {
      int64_t b = k / q.block_size;
      w[static_cast<size_t>(k * q.N + n)] =
          (static_cast<float>(code_at(q, n, k)) - zero_point_value(q, n, b)) * q.scales[static_cast<size_t>(n * q.n_blocks + b)];
    }
  return w;
}

QuantSpec parse_scheme(const std::string& scheme, int64_t default_group) {
  std::string s = scheme;
  QuantSpec spec;
  int64_t group = -1;
  if (auto colon = s.find(':'); colon != std::string::npos) {
    try {
      size_t used = 0;
      group = std::stoll(s.substr(colon + 1), &used);
      if (used != s.size() - colon - 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw std::invalid_argument("scheme '" + scheme + "': the group size after ':' is not a number");
    }
    s.resize(colon);
  }
  if (s.size() > 5 && s.compare(s.size() - 5, 5, "-asym") == 0) {
    spec.symmetric = false;
    s.resize(s.size() - 5);
  } else if (s.size() > 4 && s.compare(s.size() - 4, 4, "-min") == 0) {
    spec.symmetric = false;
    spec.float_min = true;
    s.resize(s.size() - 4);
  }
  if (s == "int8") {
    spec.bits = 8;
    spec.block_size = group > 0 ? group : 0;
  } else if (s == "int4") {
    spec.bits = 4;
    spec.block_size = group > 0 ? group : default_group;
  } else {
    throw std::invalid_argument("unknown scheme '" + scheme + "' (known: int8, int8-asym, int8-min, int4, int4-asym, int4-min, with ':GROUP', or none)");
  }
  if (group == 0 || group < -1 || (spec.bits == 4 && spec.block_size % 2 != 0) || (group > 0 && group % 16 != 0))
    throw std::invalid_argument("scheme '" + scheme + "': the group size must be a positive multiple of 16");
  if (spec.bits == 4 && spec.block_size <= 0) throw std::invalid_argument("scheme '" + scheme + "': int4 needs a group size");
  return spec;
}

std::string scheme_name(const QuantSpec& spec) {
  std::ostringstream s;
  s << (spec.bits == 8 ? "int8" : "int4") << (spec.float_min ? "-min" : spec.symmetric ? "" : "-asym");
  if (spec.block_size > 0) s << ':' << spec.block_size;
  return s.str();
}

}  // namespace sy_quant
