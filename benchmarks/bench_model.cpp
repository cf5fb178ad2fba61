// Prefill and decode throughput of the baseline engine on the shared model
// (llama-bench's pp/tg shapes, scaled to a 512-token context).
//   bench_model [--benchmark_out=bench.json --benchmark_out_format=json]
// Model: $SWITCHYARD_BENCH_MODEL or ../shared/models/stories260K.onnx.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "engine/generator.h"

namespace {

std::string model_path() {
  if (const char* p = std::getenv("SWITCHYARD_BENCH_MODEL")) return p;
  return std::string(SWITCHYARD_SHARED_DIR) + "/models/stories260K.onnx";
}

struct Fixture {
  sy::ThreadPool threads;
  sy::KernelRegistry registry = sy::KernelRegistry::with_builtins();
  std::unique_ptr<sy::DecoderModel> model;
  explicit Fixture(int n_threads) : threads(n_threads) { model = sy::DecoderModel::load(model_path(), registry, &threads); }
};

// pp: one forward over a prompt of state.range(0) tokens.
void BM_Prefill(benchmark::State& state) {
  Fixture f(static_cast<int>(state.range(1)));
  sy::BaselineGenerator gen(*f.model);
  std::vector<int> prompt(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 3 + static_cast<int>((i * 37) % 500);
  prompt[0] = 1;
  for (auto _ : state) benchmark::DoNotOptimize(gen.last_logits(prompt));
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(prompt.size()) * static_cast<double>(state.iterations()),
                                                      benchmark::Counter::kIsRate);
}

// tg: greedy generation of state.range(0) tokens from BOS (one token per step).
void BM_Decode(benchmark::State& state) {
  Fixture f(static_cast<int>(state.range(1)));
  sy::BaselineGenerator gen(*f.model);
  sy::GenerationRequest req;
  req.prompt = {1};
  req.max_tokens = static_cast<int>(state.range(0));
  req.stop_at_eos = false;
  int64_t tokens = 0;
  for (auto _ : state) tokens += static_cast<int64_t>(gen.generate({req})[0].tokens.size());
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

// Batched decode: state.range(2) sequences generated together.
void BM_DecodeBatch(benchmark::State& state) {
  Fixture f(static_cast<int>(state.range(1)));
  sy::BaselineGenerator gen(*f.model);
  std::vector<sy::GenerationRequest> batch(static_cast<size_t>(state.range(2)));
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].prompt = {1, 3 + static_cast<int>(i)};
    batch[i].max_tokens = static_cast<int>(state.range(0));
    batch[i].stop_at_eos = false;
  }
  int64_t tokens = 0;
  for (auto _ : state)
    for (const auto& r : gen.generate(batch)) tokens += static_cast<int64_t>(r.tokens.size());
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Prefill)->ArgNames({"tokens", "threads"})->Args({128, 1})->Args({128, 2})->Args({512, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->ArgNames({"tokens", "threads"})->Args({256, 1})->Args({256, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeBatch)->ArgNames({"tokens", "threads", "batch"})->Args({128, 2, 8})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
