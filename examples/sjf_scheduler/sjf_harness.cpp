// Unit test of the example scheduler without the engine: the SDK's harness
// drives it through generated workloads (a cache small enough to preempt,
// chunked prefill) and checks the scheduler contract.
//   sjf_harness path/to/libsjf_scheduler.so
#include <switchyard/plugin_testing.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s libsjf_scheduler.so\n", argv[0]);
    return 2;
  }
  namespace pt = sy::plugin::testing;
  int failures = 0;
  for (const char* chunk : {"256", "32"}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      pt::MockHost host;
      host.load(argv[1]);
      pt::SchedulerWorkload w;
      w.seed = seed;
      const pt::Report r = pt::check_scheduler(host, "shortest-first", {{"chunk_size", chunk}}, w);
      std::printf("chunk_size %s, seed %llu: %s", chunk, static_cast<unsigned long long>(seed), r.summary().c_str());
      failures += !r.ok();
    }
  }
  std::printf("%s\n", failures ? "FAILED" : "all workloads kept the scheduler contract");
  return failures ? 1 : 0;
}
