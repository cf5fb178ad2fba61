#include "passes/equivalence_probe.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

#include "passes/graph_eval.h"
#include "switchyard/plugin.h"

namespace sy {

namespace {

bool step_mode(const Graph& g) {
  for (const Node& n : g.nodes)
    if (!n.dead && n.domain == SY_OP_DOMAIN && n.op_type == SY_OP_PAGED_ATTENTION) return true;
  return false;
}

struct Feeds {
  std::vector<ValueId> ids;
  std::vector<Tensor> tensors;
};

// Graph inputs for one case: the padded decoder inputs, or in step mode the
// flattened tokens and positions of the ragged batch.
Feeds feeds_for(const Graph& g, const ModelIO& io, bool step, const ProbeInputs& in, const ScratchStep& scratch) {
  if (!step) return {in.ids, in.tensors};
  Feeds f;
  const auto& toks = scratch.flat_tokens();
  const auto T = static_cast<int64_t>(toks.size());
  auto add = [&](int slot, const std::vector<int64_t>& data, Shape s) {
    if (slot < 0) return;
    f.ids.push_back(g.inputs[static_cast<size_t>(slot)]);
    f.tensors.push_back(Tensor::from<int64_t>(s, std::span<const int64_t>(data)));
  };
  add(io.input_ids, toks, Shape{1, T});
  add(io.position_ids, scratch.flat_positions(), Shape{1, T});
  // Past inputs a fused graph still reads the shape of: an empty one-row past,
  // as the step engine feeds them.
  for (const KvLayer& l : io.layers)
    for (int slot : {l.past_key, l.past_value}) {
      if (slot < 0) continue;
      const bool transposed = slot == l.past_key && l.key_seq_axis == 3;
      const int64_t d = slot == l.past_key || io.value_dim == 0 ? io.head_dim : io.value_dim;
      f.ids.push_back(g.inputs[static_cast<size_t>(slot)]);
      f.tensors.push_back(Tensor::empty(DType::F32, transposed ? Shape{1, io.kv_heads, d, 0} : Shape{1, io.kv_heads, 0, d}));
    }
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.values[static_cast<size_t>(g.inputs[i])].name == "logits_indices") {
      std::vector<int64_t> rows(static_cast<size_t>(T));
      for (int64_t r = 0; r < T; ++r) rows[static_cast<size_t>(r)] = r;
      add(static_cast<int>(i), rows, Shape{T});
    }
  return f;
}

double scale_of(const Tensor& t) {
  double m = 1;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(static_cast<double>(t.data<float>()[i])));
  return m;
}

// Largest |a - b| over matching float tensors (NaN counts as infinite).
// A copy of t with its float values moved by 2^-20 relative (a few ulps),
// up, or (alternating) up and down element by element; other types
// unchanged. A rewrite's last-bit differences go both ways: under int8
// activations one direction can leave every code where it was while the
// other crosses a rounding boundary.
Tensor nudged(const Tensor& t, bool alternate = false) {
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(out.raw(), t.raw(), t.bytes());
  if (out.dtype() == DType::F32)
    for (int64_t k = 0; k < out.numel(); ++k) out.data<float>()[k] *= alternate && (k % 2) ? 1.f - 0x1p-20f : 1.f + 0x1p-20f;
  return out;
}

double deviation(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.data<float>()[i], y = b.data<float>()[i];
    double e = std::abs(x - y);
    d = std::max(d, std::isnan(e) ? INFINITY : e);
  }
  return d;
}

std::string describe_node(const Graph& g, ValueId v) {
  for (const Node& n : g.nodes) {
    if (n.dead || std::find(n.outputs.begin(), n.outputs.end(), v) == n.outputs.end()) continue;
    std::ostringstream os;
    int64_t layer = n.attr_int("layer", -1);
    if (layer >= 0) os << "layer " << layer << " (node '" << n.name << "', " << n.op_type << ")";
    else os << "node '" << n.name << "' (" << n.op_type << ")";
    return os.str();
  }
  return "value '" + g.values[static_cast<size_t>(v)].name + "'";
}

std::vector<ProbeCase> probe_cases(const Graph& after, const PassEnv& env) {
  // Lengths past any attention window the rewrite carries.
  int64_t window = 0;
  for (const Node& n : after.nodes)
    if (!n.dead) window = std::max(window, n.attr_int("window", 0));
  int64_t L = window > 0 ? window + 4 : 9;
  if (env.max_context > 0) L = std::min(L, std::max<int64_t>(env.max_context / 3, 2));
  const bool right = env.io && env.io->right_padding;
  std::vector<ProbeCase> cases;
  cases.push_back({"prefill of " + std::to_string(L), 0, {L}, right});
  cases.push_back({"decode after " + std::to_string(L + 2), L + 2, {1}, right});
  cases.push_back({"chunk of 3 after " + std::to_string(L), L, {3}, right});
  cases.push_back({std::string(right ? "right" : "left") + "-padded batch of " + std::to_string(L) + " and " + std::to_string(L - 2), 0,
                   {L, std::max<int64_t>(L - 2, 1)}, right});
  return cases;
}

}  // namespace

PassEnv make_pass_env(const Graph& g, const std::string& model_path, const GenaiConfig* genai, int64_t config_context,
                      const KernelRegistry& registry, ThreadPool* threads) {
  PassEnv env;
  env.registry = &registry;
  env.threads = threads;
  env.model_path = model_path;
  env.genai = genai;
  try {
    env.io = discover_model_io(g, model_path, genai, {"logits_indices"}, /*fused=*/true);
    env.vocab_size = model_vocab_size(g, *env.io);
    if (env.vocab_size <= 0 && genai) env.vocab_size = genai->vocab_size;
  } catch (const std::exception& e) {
    env.io_error = e.what();
  }
  env.max_context = model_context_length(g, genai, config_context, model_path);
  return env;
}

ProbeReport prove_rewrite(const std::string& pass, const Graph& before, const Graph& after, const PassEnv& env) {
  auto t0 = std::chrono::steady_clock::now();
  ProbeReport rep;
  rep.pass = pass;
  if (!env.approximate.empty()) {
    rep.skipped = "approximate: " + env.approximate;
    return rep;
  }
  if (!env.io || env.io->layers.empty()) {
    rep.skipped = "no decoder-with-past interface" + (env.io_error.empty() ? std::string() : ": " + env.io_error);
    return rep;
  }
  const ModelIO& io_before = *env.io;
  const ModelIO io_after = discover_model_io(after, env.model_path, env.genai, {"logits_indices"}, true);
  const bool step_before = step_mode(before), step_after = step_mode(after);

  // Regions: what the pass replaced, and the original values its new nodes read.
  const auto old_values = static_cast<ValueId>(before.values.size());
  std::vector<std::pair<ValueId, ValueId>> pairs;
  for (const auto& [from, to] : env.replaced)
    if (from < old_values && to >= old_values) pairs.emplace_back(from, to);
  std::set<ValueId> boundary_set;
  for (size_t n = before.nodes.size(); n < after.nodes.size(); ++n) {
    const Node& node = after.nodes[n];
    if (node.dead) continue;
    for (ValueId v : node.inputs)
      if (v != kNoValue && v < old_values && !before.values[static_cast<size_t>(v)].constant) boundary_set.insert(v);
  }
  std::vector<ValueId> boundary(boundary_set.begin(), boundary_set.end());
  rep.regions = static_cast<int>(pairs.size());

  const ValueId logits_before = before.outputs[static_cast<size_t>(io_before.logits)].value;
  const ValueId logits_after = after.outputs[static_cast<size_t>(io_after.logits)].value;
  std::vector<ValueId> want_before;
  for (const auto& p : pairs) want_before.push_back(p.first);
  want_before.insert(want_before.end(), boundary.begin(), boundary.end());
  want_before.push_back(logits_before);
  std::vector<ValueId> want_region;
  for (const auto& p : pairs) want_region.push_back(p.second);

  std::unique_ptr<SubgraphRunner> run_before, run_after, run_region, run_mixed;
  const std::vector<ProbeCase> cases = probe_cases(after, env);
  // One case's synthetic inputs, as both graphs are fed them.
  struct CaseFeeds {
    ProbeInputs in;
    std::unique_ptr<ScratchStep> scratch;  // its context points into itself
    Feeds before, after;
  };
  auto feeds_of = [&](size_t i) {
    CaseFeeds f;
    f.in = synthetic_decoder_inputs(before, io_before, cases[i], env.vocab_size, 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(i));
    f.scratch = std::make_unique<ScratchStep>(io_before, cases[i], f.in);
    f.before = feeds_for(before, io_before, step_before, f.in, *f.scratch);
    f.after = feeds_for(after, io_after, step_after, f.in, *f.scratch);
    return f;
  };
  // Each replaced region, fed the original's own boundary values (the
  // values b holds after the replaced ones): its outputs.
  auto run_regions = [&](const ProbeCase& c, const std::vector<Tensor>& b, const ScratchStep& scratch) {
    if (!run_region) run_region = std::make_unique<SubgraphRunner>(after, *env.registry, env.threads, boundary, want_region);
    std::vector<Tensor> feeds(b.begin() + static_cast<ptrdiff_t>(pairs.size()), b.begin() + static_cast<ptrdiff_t>(pairs.size() + boundary.size()));
    try {
      return run_region->run(feeds, step_after ? scratch.context() : nullptr);
    } catch (const std::exception& e) {
      SY_THROW_KIND(ErrorKind::PluginFailure,
                    "pass '" << pass << "' refused: a rewritten region fails on the probe case '" << c.name << "': " << e.what());
    }
  };
  // How much the original's own logits move on case i when its replaced
  // values are swapped for the rewritten regions' (proven equal), or moved
  // by a few ulps, or its float inputs are: ops downstream that quantize
  // their activations amplify last-bit differences, and the whole-graph
  // check must not hold the rewrite to more than that. Four more runs of
  // the model per case, so measured only once a case's logits miss the
  // strict tolerance: a rewrite within it is accepted whatever this is.
  // b: the original's outputs on the case; r: the regions' (single rows).
  std::vector<bool> measured(cases.size(), false);
  double sensitivity = 0;
  auto measure_sensitivity = [&](size_t i, const CaseFeeds& f, const std::vector<Tensor>& b, const std::vector<Tensor>* r) {
    if (measured[i] || pairs.empty()) return;
    measured[i] = true;
    const Feeds& fb = f.before;
    const sy_step_context* ctx = step_before ? f.scratch->context() : nullptr;
    if (!run_mixed) {
      std::vector<ValueId> fed = fb.ids;
      for (const auto& pr : pairs) fed.push_back(pr.first);
      run_mixed = std::make_unique<SubgraphRunner>(before, *env.registry, env.threads, fed, std::vector<ValueId>{logits_before});
    }
    // The original with its replaced values fed from outside: the rewritten
    // regions' ...
    if (r) {
      std::vector<Tensor> mixed_feeds = fb.tensors;
      mixed_feeds.insert(mixed_feeds.end(), r->begin(), r->end());
      sensitivity = std::max(sensitivity, deviation(b.back(), run_mixed->run(mixed_feeds, ctx)[0]));
    }
    // ... or its own moved by a few ulps, up or up and down: how far the
    // layers after them amplify a last-bit difference, on this case itself
    // (a padded batch can turn one into a code step of a quantized
    // activation where the single rows did not).
    for (bool alternate : {false, true}) {
      std::vector<Tensor> nudged_feeds = fb.tensors;
      for (size_t k = 0; k < pairs.size(); ++k) nudged_feeds.push_back(nudged(b[k], alternate));
      sensitivity = std::max(sensitivity, deviation(b.back(), run_mixed->run(nudged_feeds, ctx)[0]));
    }
    // A rewrite's regions can be bitwise exact on one case while its whole
    // graph is not (last-bit differences compound through the layers, and
    // quantized activations turn one into a code step): the original itself,
    // its float inputs moved by a few ulps (a prefill has none to move).
    std::vector<Tensor> jittered_feeds;
    for (const Tensor& in_t : fb.tensors) jittered_feeds.push_back(nudged(in_t));
    sensitivity = std::max(sensitivity, deviation(b.back(), run_before->run(jittered_feeds, ctx).back()));
  };
  // An earlier case, run again (its outputs were not kept: they are needed
  // only on this rare path).
  auto measure_earlier = [&](size_t i) {
    if (measured[i]) return;
    const CaseFeeds f = feeds_of(i);
    const std::vector<Tensor> b = run_before->run(f.before.tensors, step_before ? f.scratch->context() : nullptr);
    const bool single = cases[i].batch() == 1 && !pairs.empty();
    const std::vector<Tensor> r = single ? run_regions(cases[i], b, *f.scratch) : std::vector<Tensor>{};
    measure_sensitivity(i, f, b, single ? &r : nullptr);
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const ProbeCase& c = cases[ci];
    const CaseFeeds f = feeds_of(ci);
    const Feeds& fb = f.before;
    const Feeds& fa = f.after;
    const ScratchStep& scratch = *f.scratch;
    if (!run_before) {
      try {
        run_before = std::make_unique<SubgraphRunner>(before, *env.registry, env.threads, fb.ids, want_before);
      } catch (const std::exception& e) {
        // The original may hold ops only the rewrite can run (QDQ weights
        // mapped to quantized matmuls): nothing to compare against.
        rep.skipped = std::string("the original graph cannot run here: ") + e.what();
        return rep;
      }
    }
    if (!run_after) run_after = std::make_unique<SubgraphRunner>(after, *env.registry, env.threads, fa.ids, std::vector<ValueId>{logits_after});
    std::vector<Tensor> b;
    try {
      b = run_before->run(fb.tensors, step_before ? scratch.context() : nullptr);
    } catch (const std::exception& e) {
      SY_THROW("equivalence probe of pass '" << pass << "': the original graph fails on the probe case '" << c.name << "': " << e.what());
    }
    std::vector<Tensor> a;
    try {
      a = run_after->run(fa.tensors, step_after ? scratch.context() : nullptr);
    } catch (const std::exception& e) {
      SY_THROW_KIND(ErrorKind::PluginFailure,
                    "pass '" << pass << "' refused: the rewritten graph fails on the probe case '" << c.name << "': " << e.what());
    }
    ++rep.cases;
    // 1. Each replaced region, fed the original's own boundary values (one row).
    std::vector<Tensor> regions;
    const bool single = c.batch() == 1 && !pairs.empty();
    if (single) {
      regions = run_regions(c, b, scratch);
      for (size_t i = 0; i < pairs.size(); ++i) {
        const Tensor& orig = b[i];
        const Tensor& mine = regions[i];
        SY_CHECK(orig.dtype() == DType::F32 && mine.dtype() == DType::F32 && orig.shape() == mine.shape(),
                 "pass '" << pass << "' refused: " << describe_node(after, pairs[i].second) << " computes shape " << mine.shape().str()
                          << " where the original computed " << orig.shape().str() << " (probe case '" << c.name << "')");
        const double d = deviation(orig, mine), tol = kProbeTolerance * scale_of(orig);
        rep.max_deviation = std::max(rep.max_deviation, d);
        SY_CHECK_KIND(d <= tol, ErrorKind::PluginFailure, "pass '" << pass << "' refused: its rewrite of " << describe_node(after, pairs[i].second)
                                    << " deviates from the original by " << d << " (tolerance " << tol << ") on the probe case '"
                                    << c.name << "'");
      }
    }
    // 2. The whole graph's logits at every real position of every row.
    const Tensor& lb = b.back();
    const Tensor& la = a[0];
    SY_CHECK(lb.rank() == 3 && la.rank() == 3 && lb.dim(2) == la.dim(2), "pass '" << pass << "' refused: logits of shape "
                                                                                   << la.shape().str() << " against the original's " << lb.shape().str());
    const int64_t V = lb.dim(2), L = c.width();
    int64_t flat = 0;
    double worst = 0, scale = scale_of(lb);
    for (int64_t r = 0; r < c.batch(); ++r) {
      const int64_t n = c.lengths[static_cast<size_t>(r)], first = c.right_pad ? 0 : L - n;
      for (int64_t j = 0; j < n; ++j, ++flat) {
        const float* x = lb.data<float>() + ((step_before ? 0 : r * L + first + j) + (step_before ? flat : 0)) * V;
        const float* y = la.data<float>() + ((step_after ? 0 : r * L + first + j) + (step_after ? flat : 0)) * V;
        for (int64_t v = 0; v < V; ++v) {
          const double e = std::abs(static_cast<double>(x[v]) - y[v]);
          worst = std::max(worst, std::isnan(e) ? INFINITY : e);
        }
      }
    }
    rep.max_deviation = std::max(rep.max_deviation, worst);
    double tolerance = kProbeTolerance * scale;
    if (worst > tolerance) {
      // Outside the strict bound: allow what the original's own logits
      // move by, measured on every case so far (this one first, the
      // earlier ones only if it is not enough).
      measure_sensitivity(ci, f, b, single ? &regions : nullptr);
      for (size_t k = 0; k < ci && worst > 4 * sensitivity; ++k) measure_earlier(k);
      rep.logit_sensitivity = sensitivity;
      tolerance = std::max(tolerance, 4 * sensitivity);
    }
    if (worst > tolerance) {
      std::ostringstream os;
      os << "pass '" << pass << "' refused: the rewritten graph's logits deviate from the original's by " << worst << " (tolerance "
         << tolerance << ") on the probe case '" << c.name << "'";
      // A ragged step has no past tensors: a graph that takes positions or
      // lengths from their shapes cannot run in it.
      if (step_after && c.past > 0)
        for (const KvLayer& l : io_after.layers)
          for (int slot : {l.past_key, l.past_value})
            if (slot >= 0 && run_after->reads_input(after.inputs[static_cast<size_t>(slot)])) {
              os << "; the rewritten graph still reads the shape of '" << after.values[static_cast<size_t>(after.inputs[static_cast<size_t>(slot)])].name
                 << "' (positions or lengths taken from the past KV cache, which the step engine's ragged batch does not have)";
              throw Error(os.str(), ErrorKind::PluginFailure);
            }
      throw Error(os.str(), ErrorKind::PluginFailure);
    }
  }
  rep.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace sy
