#include <vector>

#include "contrib_plugin.h"

namespace sy_contrib {

using sy::plugin::Error;

GatherBlockQuantized::GatherBlockQuantized(const sy::plugin::NodeRef& n) {
  bits_ = n.graph.attr_int(n.node, "bits").value_or(4);
  block_ = n.graph.attr_int(n.node, "block_size").value_or(128);
  gather_axis_ = n.graph.attr_int(n.node, "gather_axis").value_or(0);
  quantize_axis_ = n.graph.attr_int(n.node, "quantize_axis").value_or(1);
  if (bits_ != 4 && bits_ != 8) throw Error("GatherBlockQuantized: bits must be 4 or 8", SY_UNSUPPORTED);
  if (gather_axis_ != 0) throw Error("GatherBlockQuantized: only gather_axis=0 (embedding rows) is supported", SY_UNSUPPORTED);
  if (block_ < 16 || (block_ & (block_ - 1))) throw Error("GatherBlockQuantized: block_size must be a power of two >= 16", SY_INVALID_ARGUMENT);
}

void GatherBlockQuantized::compute(sy::plugin::KernelIO& io) {
  auto data = io.input(0), idx = io.input(1), scales = io.input(2);
  if (data.dtype() != SY_DTYPE_UINT8) throw Error("GatherBlockQuantized: data must be uint8 (packed codes)", SY_UNSUPPORTED);
  if (data.rank() != 2 || quantize_axis_ != 1)
    throw Error("GatherBlockQuantized: only a [rows, packed columns] table quantized along its last axis is supported", SY_UNSUPPORTED);
  if (scales.dtype() != SY_DTYPE_FLOAT32) throw Error("GatherBlockQuantized: scales must be float32", SY_UNSUPPORTED);
  const int64_t rows = data.dim(0), per_byte = 8 / bits_, cols = data.dim(1) * per_byte;
  const int64_t blocks = (cols + block_ - 1) / block_;
  if (scales.numel() != rows * blocks) throw Error("GatherBlockQuantized: scales must be [rows, ceil(columns / block_size)]", SY_INVALID_ARGUMENT);
  const uint8_t* zp = io.has_input(3) ? io.input(3).data<uint8_t>() : nullptr;
  const int64_t zp_row_bytes = (blocks * bits_ + 7) / 8;
  const int64_t n = idx.numel();
  std::vector<int64_t> out_dims = idx.dims();
  out_dims.push_back(cols);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, out_dims);
  float* out = y.data<float>();
  const uint8_t* q = data.data<uint8_t>();
  const float* sc = scales.data<float>();
  const int32_t default_zp = bits_ == 4 ? 8 : 128;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = idx.dtype() == SY_DTYPE_INT64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
    if (r < 0) r += rows;
    if (r < 0 || r >= rows) throw Error("GatherBlockQuantized: index " + std::to_string(r) + " is out of range", SY_INVALID_ARGUMENT);
    const uint8_t* row = q + r * data.dim(1);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t blk = c / block_;
      int32_t code = bits_ == 8 ? row[c] : (c & 1 ? row[c >> 1] >> 4 : row[c >> 1] & 0xF);
      int32_t z = default_zp;
      if (zp) {
        const uint8_t* zr = zp + r * zp_row_bytes;
        z = bits_ == 8 ? zr[blk] : (blk & 1 ? zr[blk >> 1] >> 4 : zr[blk >> 1] & 0xF);
      }
      out[i * cols + c] = static_cast<float>(code - z) * sc[r * blocks + blk];
    }
  }
}

}  // namespace sy_contrib
