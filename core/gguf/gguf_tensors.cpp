#include "gguf/gguf_tensors.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/half.h"

// The block formulas are evaluated in float32 in ggml's order (d * sc first,
// then times the code, then the min subtracted); this file is built with
// -ffp-contract=off so no FMA changes a rounding.

namespace sy::gguf {

namespace {

constexpr int64_t QK = 32, QK_K = 256;

float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

void q4_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void q5_common(const uint8_t* qhp, const uint8_t* qs, float d, float m, bool has_min, float* y) {
  uint32_t qh;
  std::memcpy(&qh, qhp, 4);
  for (int j = 0; j < 16; ++j) {
    const int xh0 = static_cast<int>(((qh >> j) << 4) & 0x10), xh1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    const int x0 = (qs[j] & 0xF) | xh0, x1 = (qs[j] >> 4) | xh1;
    if (has_min) {
      y[j] = static_cast<float>(x0) * d + m;
      y[j + 16] = static_cast<float>(x1) * d + m;
    } else {
      y[j] = static_cast<float>(x0 - 16) * d;
      y[j + 16] = static_cast<float>(x1 - 16) * d;
    }
  }
}

void q5_0(const uint8_t* b, float* y) { q5_common(b + 2, b + 6, f16(b), 0.f, false, y); }
void q5_1(const uint8_t* b, float* y) { q5_common(b + 4, b + 8, f16(b), f16(b + 2), true, y); }

void q8_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void q8_1(const uint8_t* b, float* y) {  // d, s (fp16 each), 32 int8 codes
  const float d = f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block.
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q2_k(const uint8_t* b, float* y) {  // scales[16], qs[64], d, dmin
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = f16(b + 80), dmin = f16(b + 82);
  int is = 0;
  for (int n = 0; n < QK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

// Q3_K's sixteen 6-bit scales, packed in 12 bytes at offset 96, unpacked
// (still biased by 32).
void q3_k_scales(const uint8_t* b, int8_t scales[16]) {
  uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(scales, aux, 16);
}

void q3_k(const uint8_t* b, float* y) {  // hmask[32], qs[64], scales[12], d
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const float d = f16(b + 108);
  int8_t scales[16];
  q3_k_scales(b, scales);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < QK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          *y++ = dl * static_cast<float>(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
      shift += 2;
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

void q4_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qs[128]
  const float d = f16(b), dmin = f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < QK_K; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

void q5_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qh[32], qs[128]
  const float d = f16(b), dmin = f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < QK_K; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void q6_k(const uint8_t* b, float* y) {  // ql[128], qh[64], scales[16] (int8), d
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16(b + 208);
  for (int n = 0; n < QK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void q8_k(const uint8_t* b, float* y) {  // d (float32), qs[256], bsums[16]
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < QK_K; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

}  // namespace

std::vector<float> dequantize(const TensorInfo& t, const std::vector<uint8_t>& raw) {
  const auto layout = block_layout(t.type);
  SY_CHECK_KIND(layout, ErrorKind::Unsupported, "tensor '" << t.name << "': ggml type " << type_name(t.type) << " cannot be read");
  SY_CHECK(raw.size() == t.bytes, "tensor '" << t.name << "': " << raw.size() << " bytes of data, expected " << t.bytes);
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;  // (an empty vector's data() may be null: no memcpy from it)
  const uint8_t* src = raw.data();
  float* y = out.data();
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (static_cast<TensorType>(t.type)) {
    case TensorType::F32: std::memcpy(y, src, static_cast<size_t>(n) * 4); return out;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16(src + 2 * i);
      return out;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        y[i] = bf16_to_float(h);
      }
      return out;
    case TensorType::Q4_0: block = q4_0; break;
    case TensorType::Q4_1: block = q4_1; break;
    case TensorType::Q5_0: block = q5_0; break;
    case TensorType::Q5_1: block = q5_1; break;
    case TensorType::Q8_0: block = q8_0; break;
    case TensorType::Q8_1: block = q8_1; break;
    case TensorType::Q2_K: block = q2_k; break;
    case TensorType::Q3_K: block = q3_k; break;
    case TensorType::Q4_K: block = q4_k; break;
    case TensorType::Q5_K: block = q5_k; break;
    case TensorType::Q6_K: block = q6_k; break;
    case TensorType::Q8_K: block = q8_k; break;
  }
  SY_CHECK_KIND(block, ErrorKind::Unsupported, "tensor '" << t.name << "': ggml type " << type_name(t.type) << " cannot be read");
  const int64_t blocks = n / layout->elements;
  for (int64_t i = 0; i < blocks; ++i) block(src + i * layout->bytes, y + i * layout->elements);
  return out;
}

namespace {

// The other block types as sub-blocks of integer codes c with a scale s and
// an offset m (w = s * c + m; m = 0 for the symmetric ones, whose codes are
// signed). Each fills codes for one ggml block and s, m per sub-block.
struct Decomposition {
  int group;      // sub-block length
  int bits;       // MatMulNBits code width that holds the codes
  bool symmetric; // signed codes, no offset
  void (*fn)(const uint8_t* b, int* c, float* s, float* m);
};

void dec_q5_0(const uint8_t* b, int* c, float* s, float*) {
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    c[j] = ((qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10)) - 16;
    c[j + 16] = ((qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10)) - 16;
  }
  s[0] = f16(b);
}

void dec_q5_1(const uint8_t* b, int* c, float* s, float* m) {
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    c[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10);
    c[j + 16] = (qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
  }
  s[0] = f16(b);
  m[0] = f16(b + 2);
}

void dec_q2_k(const uint8_t* b, int* c, float* s, float* m) {
  const uint8_t* q = b + 16;
  const float d = f16(b + 80), dmin = f16(b + 82);
  for (int g = 0; g < 16; ++g) {  // sub-block g: 16 codes at 2 bits, shift by its place in the 128-element half
    const int half = g / 8, j = (g % 8) / 2, second = g % 2;
    for (int l = 0; l < 16; ++l) c[g * 16 + l] = (q[half * 32 + l + 16 * second] >> (2 * j)) & 3;
    s[g] = d * static_cast<float>(b[g] & 0xF);
    m[g] = -(dmin * static_cast<float>(b[g] >> 4));
  }
}

void dec_q3_k(const uint8_t* b, int* c, float* s, float*) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const float d = f16(b + 108);
  int8_t scales[16];
  q3_k_scales(b, scales);
  for (int g = 0; g < 16; ++g) {
    const int half = g / 8, j = (g % 8) / 2, second = g % 2;
    const uint8_t mask = static_cast<uint8_t>(1 << (half * 4 + j));
    for (int l = 0; l < 16; ++l) {
      const int k = l + 16 * second;
      c[g * 16 + l] = ((q[half * 32 + k] >> (2 * j)) & 3) - ((hm[k] & mask) ? 0 : 4);
    }
    s[g] = d * static_cast<float>(scales[g] - 32);
  }
}

void dec_q45_k(const uint8_t* b, int* c, float* s, float* m, bool five) {
  const float d = f16(b), dmin = f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five ? 48 : 16);
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, mn;
    scale_min_k4(g, scales, sc, mn);
    s[g] = d * static_cast<float>(sc);
    m[g] = -(dmin * static_cast<float>(mn));
    const int pair = g / 2, high = g % 2;
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = q[pair * 32 + l];
      int v = high ? byte >> 4 : byte & 0xF;
      if (five && (qh[l] & (1 << g))) v += 16;
      c[g * 32 + l] = v;
    }
  }
}
void dec_q4_k(const uint8_t* b, int* c, float* s, float* m) { dec_q45_k(b, c, s, m, false); }
void dec_q5_k(const uint8_t* b, int* c, float* s, float* m) { dec_q45_k(b, c, s, m, true); }

void dec_q6_k(const uint8_t* b, int* c, float* s, float*) {
  const float d = f16(b + 208);
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      c[128 * n + l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      c[128 * n + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      c[128 * n + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      c[128 * n + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
    }
    for (int g = 0; g < 8; ++g) s[8 * n + g] = d * static_cast<float>(sc[8 * n + g]);
  }
}

std::optional<Decomposition> decomposition(TensorType t) {
  switch (t) {
    case TensorType::Q5_0: return Decomposition{32, 8, true, dec_q5_0};
    case TensorType::Q5_1: return Decomposition{32, 8, false, dec_q5_1};
    case TensorType::Q2_K: return Decomposition{16, 4, false, dec_q2_k};
    case TensorType::Q3_K: return Decomposition{16, 4, true, dec_q3_k};
    case TensorType::Q4_K: return Decomposition{32, 4, false, dec_q4_k};
    case TensorType::Q5_K: return Decomposition{32, 8, false, dec_q5_k};
    case TensorType::Q6_K: return Decomposition{16, 8, true, dec_q6_k};
    default: return std::nullopt;
  }
}

// A block type with sub-block scales (and mins) as MatMulNBits: codes in
// 4 or 8 bits, one scale per sub-block, mins as float zero points -m / s.
std::optional<BlockQuant> decomposed_block_quant(const TensorInfo& t, const std::vector<uint8_t>& raw, const Decomposition& dec) {
  const auto layout = *block_layout(t.type);
  BlockQuant q;
  q.bits = dec.bits;
  q.K = t.dims[0];
  q.N = t.dims[1];
  q.block_size = dec.group;
  const int64_t blocks = q.K / layout.elements * q.N, subs = layout.elements / dec.group;
  q.codes.assign(static_cast<size_t>(blocks * layout.elements * q.bits / 8), 0);
  q.scales.resize(static_cast<size_t>(blocks * subs));
  if (!dec.symmetric) q.float_zero_points.resize(static_cast<size_t>(blocks * subs));
  const int zp_sym = 1 << (q.bits - 1);
  std::vector<int> c(static_cast<size_t>(layout.elements));
  std::vector<float> s(static_cast<size_t>(subs)), m(static_cast<size_t>(subs), 0.f);
  for (int64_t i = 0; i < blocks; ++i) {
    dec.fn(raw.data() + i * layout.bytes, c.data(), s.data(), m.data());
    for (int64_t g = 0; g < subs; ++g) {
      const size_t at = static_cast<size_t>(i * subs + g);
      q.scales[at] = s[static_cast<size_t>(g)];
      if (!dec.symmetric) {
        if (s[static_cast<size_t>(g)] == 0.f && m[static_cast<size_t>(g)] != 0.f) return std::nullopt;
        q.float_zero_points[at] = s[static_cast<size_t>(g)] == 0.f ? 0.f : -m[static_cast<size_t>(g)] / s[static_cast<size_t>(g)];
      }
    }
    for (int64_t k = 0; k < layout.elements; ++k) {
      const int code = c[static_cast<size_t>(k)] + (dec.symmetric ? zp_sym : 0);
      const int64_t e = i * layout.elements + k;
      if (q.bits == 8) q.codes[static_cast<size_t>(e)] = static_cast<uint8_t>(code);
      else q.codes[static_cast<size_t>(e / 2)] |= static_cast<uint8_t>((code & 0xF) << (4 * (e % 2)));
    }
  }
  return q;
}

}  // namespace

std::optional<BlockQuant> to_block_quant(const TensorInfo& t, const std::vector<uint8_t>& raw) {
  const auto type = static_cast<TensorType>(t.type);
  if (t.dims.size() != 2) return std::nullopt;
  if (auto dec = decomposition(type)) {
    SY_CHECK(raw.size() == t.bytes, "tensor '" << t.name << "': " << raw.size() << " bytes of data, expected " << t.bytes);
    return decomposed_block_quant(t, raw, *dec);
  }
  if (type != TensorType::Q8_0 && type != TensorType::Q4_0 && type != TensorType::Q4_1) return std::nullopt;
  SY_CHECK(raw.size() == t.bytes, "tensor '" << t.name << "': " << raw.size() << " bytes of data, expected " << t.bytes);
  const auto layout = *block_layout(t.type);
  BlockQuant q;
  q.bits = type == TensorType::Q8_0 ? 8 : 4;
  q.K = t.dims[0];
  q.N = t.dims[1];
  q.block_size = QK;
  const int64_t blocks = q.K / QK * q.N, blob = QK * q.bits / 8;
  q.codes.resize(static_cast<size_t>(blocks * blob));
  q.scales.resize(static_cast<size_t>(blocks));
  if (type == TensorType::Q4_1) q.float_zero_points.resize(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = raw.data() + i * layout.bytes;
    uint8_t* codes = q.codes.data() + i * blob;
    const float d = f16(b);
    q.scales[static_cast<size_t>(i)] = d;
    if (type == TensorType::Q8_0) {
      // int8 code c stands for c * d; MatMulNBits' 8-bit codes are c + 128
      // with the symmetric zero point 128.
      for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>(static_cast<int>(static_cast<int8_t>(b[2 + j])) + 128);
      continue;
    }
    // ggml keeps elements j and j + 16 in byte j; MatMulNBits keeps
    // elements 2i and 2i + 1 in byte i.
    const uint8_t* qs = b + (type == TensorType::Q4_1 ? 4 : 2);
    uint8_t nib[32];
    for (int j = 0; j < 16; ++j) {
      nib[j] = qs[j] & 0xF;
      nib[j + 16] = qs[j] >> 4;
    }
    for (int j = 0; j < 16; ++j) codes[j] = static_cast<uint8_t>(nib[2 * j] | (nib[2 * j + 1] << 4));
    if (type == TensorType::Q4_1) {
      const float m = f16(b + 2);
      if (d == 0.f) {
        if (m != 0.f) return std::nullopt;  // a constant nonzero block has no (q - zp) * d form
        q.float_zero_points[static_cast<size_t>(i)] = 0.f;
      } else {
        q.float_zero_points[static_cast<size_t>(i)] = -m / d;
      }
    }
  }
  return q;
}

}  // namespace sy::gguf
