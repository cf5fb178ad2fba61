#include "kernels/kernel_util.h"

namespace sy {

Broadcast::Broadcast(std::initializer_list<const Shape*> shapes, const char* what) {
  n = static_cast<int>(shapes.size());
  int out_rank = 0;
  for (const Shape* s : shapes) out_rank = std::max(out_rank, s->rank());
  out.resize(out_rank);
  for (int d = 0; d < out_rank; ++d) {
    int64_t size = 1;
    for (const Shape* s : shapes) {
      int sd = d - (out_rank - s->rank());
      if (sd < 0) continue;
      int64_t v = (*s)[sd];
      if (v == 1) continue;
      SY_CHECK(size == 1 || size == v, what << ": shapes cannot be broadcast together at output dim " << d << " ("
                                            << size << " vs " << v << ")");
      size = v;
    }
    // A dim of 0 in any operand makes the output dim 0.
    for (const Shape* s : shapes) {
      int sd = d - (out_rank - s->rank());
      if (sd >= 0 && (*s)[sd] == 0) size = 0;
    }
    out[d] = size;
  }
  // Per-input strides over the full output rank (0 where broadcast).
  std::array<std::array<int64_t, Shape::kMaxRank>, kMaxInputs> full{};
  int k = 0;
  for (const Shape* s : shapes) {
    auto cs = contiguous_strides(*s);
    for (int d = 0; d < out_rank; ++d) {
      int sd = d - (out_rank - s->rank());
      full[static_cast<size_t>(k)][static_cast<size_t>(d)] =
          (sd < 0 || (*s)[sd] == 1) ? 0 : cs[static_cast<size_t>(sd)];
    }
    ++k;
  }
  // Coalesce: dims of size 1 vanish; neighbours merge when every input
  // walks them contiguously (or broadcasts both).
  rank = 0;
  for (int d = 0; d < out_rank; ++d) {
    size_t du = static_cast<size_t>(d);
    if (out[d] == 1) continue;
    if (rank > 0) {
      size_t last = static_cast<size_t>(rank - 1);
      bool mergeable = true;
      for (int i = 0; i < n; ++i) {
        auto ui = static_cast<size_t>(i);
        if (strides[ui][last] != full[ui][du] * out[d]) mergeable = false;
      }
      if (mergeable) {
        dims[last] *= out[d];
        for (int i = 0; i < n; ++i) strides[static_cast<size_t>(i)][last] = full[static_cast<size_t>(i)][du];
        continue;
      }
    }
    dims[static_cast<size_t>(rank)] = out[d];
    for (int i = 0; i < n; ++i) strides[static_cast<size_t>(i)][static_cast<size_t>(rank)] = full[static_cast<size_t>(i)][du];
    ++rank;
  }
  if (rank == 0) {
    rank = 1;
    dims[0] = out.numel();  // 1 (all dims one) or 0 (empty)
    for (int i = 0; i < n; ++i) strides[static_cast<size_t>(i)][0] = 0;
  }
}

}  // namespace sy
