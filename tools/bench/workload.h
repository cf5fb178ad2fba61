// Benchmark workloads: generated (request count, Poisson or burst arrivals
// at a rate, input/output length ranges, a shared-prefix fraction, a seed)
// or replayed from a JSONL trace. Both give the same list of requests with
// arrival offsets, so two profiles see exactly the same traffic.
#pragma once
#include <string>
#include <vector>

#include "facade/engine.h"

namespace sy {

struct WorkloadRequest {
  double arrival_s = 0;  // offset from the start of the run
  GenerationRequest request;
};

struct Slo {
  double ttft_ms = 0;  // 0: no bound
  double tpot_ms = 0;
};

struct Workload {
  std::string name;
  std::vector<WorkloadRequest> requests;
  Slo slo;
  // At most this many requests in flight (0: no limit): a request is sent at
  // its arrival time or when one finishes, whichever is later (a closed
  // loop, as a fixed number of users; 1 measures batch-1 latency).
  int max_concurrency = 0;
};

// A YAML workload spec (see examples/workloads/*.yaml) or a .jsonl trace
// (one request per line: {"arrival_s", "prompt_ids" | "input_len", "output_len"}).
Workload load_workload(const std::string& path, int vocab_size);

struct WorkloadSpec {
  int requests = 32;
  std::string arrival = "poisson";  // poisson | burst
  double rate = 10;                 // requests per second (poisson)
  int input_min = 32, input_max = 256;
  int output_min = 16, output_max = 128;
  double shared_prefix = 0;  // fraction of every prompt that is one common prefix
  int vocab = 0;             // token ids in [3, vocab); 0: the model's
  uint64_t seed = 1;
  Slo slo;
  int max_concurrency = 0;  // see Workload
};
Workload generate_workload(const WorkloadSpec& spec, int vocab_size);

}  // namespace sy
