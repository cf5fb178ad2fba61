// The CPU attention tile of PagedAttention (plugins/attention/attend.h) per
// instruction-set build, one thread, on the shapes the engine gives it: a
// decode row (MHA), a GQA group's decode rows, and a 16-row prompt-chunk
// tile, each against a long paged context. Prints a table (time per call,
// nanoseconds per row-key, GFLOP/s counting 4*D flops per row-key: the
// Q.K and P.V multiply-adds) and writes JSON (--out). --keys N: another
// context length; --shape TEXT / --build NAME: only the matching rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <switchyard/plugin.hpp>

#include "attend.h"
#include "kernel_timing.h"

namespace {

struct Shape {
  const char* name;
  int64_t D, KVH;
  int32_t rows;   // query rows in the tile
  int32_t group;  // rows per token (a GQA group shares a position)
};

}  // namespace

int main(int argc, char** argv) {
  using namespace sy_attention;
  std::string out = "bench-attend.json";
  int64_t ctx = 2048;
  std::string only_shape, only_build;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--keys") && i + 1 < argc) ctx = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
    else if (!std::strcmp(argv[i], "--build") && i + 1 < argc) only_build = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_attend [--out FILE] [--keys N] [--shape TEXT] [--build NAME]\n");
      return 2;
    }
  }
  const std::vector<Shape> shapes = {
      {"decode D48 (15m)", 48, 6, 1, 1},
      {"decode D64 (110m)", 64, 12, 1, 1},
      {"decode GQA 4xD64", 64, 4, 4, 4},
      {"prefill 16xD48", 48, 6, 16, 1},
      {"prefill 16xD64", 64, 12, 16, 1},
      {"prefill 16xD128", 128, 8, 16, 1},
  };
  const int64_t BS = 16;
  std::printf("attention tile, 1 thread, %lld keys of context, block size %lld; engine path: %s\n", static_cast<long long>(ctx),
              static_cast<long long>(BS), attend_path());
  std::printf("%-20s %-8s %10s %12s %9s\n", "shape", "build", "us/call", "ns/row-key", "GFLOP/s");
  nlohmann::json results = nlohmann::json::array();
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  for (const Shape& s : shapes) {
    if (std::string(s.name).find(only_shape) == std::string::npos) continue;
    const int64_t blocks = (ctx + BS - 1) / BS;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(blocks - 1 - b);  // not in order
    const size_t cache = static_cast<size_t>(blocks * s.KVH * BS * s.D);
    std::vector<float> k(cache), v(cache), q(static_cast<size_t>(s.rows * s.D));
    for (auto& x : k) x = n(rng);
    for (auto& x : v) x = n(rng);
    for (auto& x : q) x = n(rng);
    std::vector<int64_t> last(static_cast<size_t>(s.rows));
    const int32_t tokens = s.rows / s.group;
    for (int32_t r = 0; r < s.rows; ++r) last[static_cast<size_t>(r)] = ctx - tokens + r / s.group;  // the context's last tokens
    int64_t row_keys = 0;
    for (int64_t l : last) row_keys += l + 1;
    std::vector<float> o(q.size()), scratch(static_cast<size_t>(attend_scratch_floats(s.rows, s.D, s.D)));
    for (const char* build : {"generic", "avx2", "avx512"}) {
      AttendFn fn = attend_build(build);
      if (!fn || (!only_build.empty() && only_build != build)) continue;
      AttendTile t{s.D,   s.D,      BS,          s.KVH,    0,       table.data(), k.data(), v.data(), 0, SY_DTYPE_FLOAT32,
                   0.125f, 0.f,    0,           s.rows,   q.data(), last.data(), o.data(), nullptr};
      // Enough calls per sample for about 20 ms; best of 7 samples.
      fn(t, scratch.data());
      int calls = 1;
      for (;;) {
        const double sec = sy::bench::best_seconds([&] { for (int c = 0; c < calls; ++c) fn(t, scratch.data()); }, 1);
        if (sec > 0.02 || calls > (1 << 20)) break;
        calls *= 2;
      }
      const double sec = sy::bench::best_seconds([&] { for (int c = 0; c < calls; ++c) fn(t, scratch.data()); }, 7) / calls;
      const double ns = sec * 1e9 / static_cast<double>(row_keys);
      const double gflops = 4.0 * static_cast<double>(s.D * row_keys) / sec / 1e9;
      std::printf("%-20s %-8s %10.1f %12.3f %9.2f\n", s.name, build, sec * 1e6, ns, gflops);
      results.push_back({{"shape", s.name}, {"build", build}, {"head_dim", s.D}, {"rows", s.rows}, {"keys", ctx},
                         {"us_per_call", sec * 1e6}, {"ns_per_row_key", ns}, {"gflops", gflops}});
    }
  }
  std::ofstream(out) << nlohmann::json{{"benchmark", "attend"}, {"engine_path", attend_path()}, {"results", results}}.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
