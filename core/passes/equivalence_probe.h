// The pass host's equivalence probe: before a session accepts a rewritten
// graph, every region a pass replaced is run against the original region on
// synthetic decoder inputs (several lengths, lengths past any attention
// window, a padded batch), and the whole graph's logits are compared too (in
// the step engine's ragged layout when the rewrite produced step-context
// ops). A deviation refuses the rewrite, naming the layer and the size.
#pragma once
#include <string>

#include "graph/graph.h"
#include "passes/pass_env.h"

namespace sy {

struct ProbeReport {
  std::string pass;
  int cases = 0;            // synthetic steps run
  int regions = 0;          // replaced values compared per case
  double max_deviation = 0;  // largest |original - rewritten| seen (values and logits)
  // How far the original's logits move when its replaced values are swapped
  // for the proven-equal rewritten ones (downstream quantized activations
  // amplify last-bit differences); the whole-graph check allows 4x this.
  // Measured only for a rewrite whose logits miss the strict tolerance
  // (kProbeTolerance); negative when none did.
  double logit_sensitivity = -1;
  double ms = 0;
  std::string skipped;      // why the probe did not run (approximate pass, no decoder interface)
};

// Throws sy::Error when the rewrite deviates beyond the tolerance.
ProbeReport prove_rewrite(const std::string& pass, const Graph& before, const Graph& after, const PassEnv& env);

// Values written (relative) tolerance: |a - b| <= kProbeTolerance * max(1, max|a|).
constexpr double kProbeTolerance = 1e-4;

// A PassEnv for one pass run on `g`: the model's roles (if any), context
// length (config_context: config.json's, from the model folder) and vocabulary.
PassEnv make_pass_env(const Graph& g, const std::string& model_path, const GenaiConfig* genai, int64_t config_context,
                      const KernelRegistry& registry, ThreadPool* threads);

}  // namespace sy
