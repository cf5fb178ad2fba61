#include "runtime/executor.h"

#include <sstream>
#include <utility>

namespace sy {

Executor::Executor(std::shared_ptr<const Graph> graph, const KernelRegistry& registry, ThreadPool* threads,
                   ExecutorOptions options)
    : graph_(std::move(graph)), threads_(threads), pool_(BufferPool::create()) {
  const Graph& g = *graph_;
  slots_.resize(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].constant) slots_[i] = *g.values[i].constant;

  std::vector<NodeId> order = g.topological_order();
  // Last step reading each value; graph outputs and constants are never released.
  std::vector<int> last_use(g.values.size(), -1);
  for (size_t s = 0; s < order.size(); ++s)
    for (ValueId in : g.nodes[static_cast<size_t>(order[s])].inputs)
      if (in != kNoValue) last_use[static_cast<size_t>(in)] = static_cast<int>(s);
  std::vector<bool> pinned(g.values.size(), false);
  for (const GraphOutput& o : g.outputs) pinned[static_cast<size_t>(o.value)] = true;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].constant) pinned[i] = true;

  std::vector<std::string> missing;
  size_t max_outputs = 1;
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.nodes[static_cast<size_t>(order[s])];
    std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    auto pin = options.pinned_providers.find(n.op_type);
    DType key = DType::Undefined;
    const KernelDef* def = registry.find_for_node(g, n, options.device, options.forbidden_providers,
                                                  pin == options.pinned_providers.end() ? std::string() : pin->second, &key);
    if (!def) {
      std::ostringstream os;
      os << op << " (opset " << g.opset(n.domain) << ", " << dtype_name(key) << ", node '" << n.name << "')";
      missing.push_back(os.str());
      continue;
    }
    Step step;
    step.node = order[s];
    try {
      step.kernel = def->create(KernelCreateInfo{g, n, g.opset(n.domain)});
    } catch (const std::exception& e) {
      SY_THROW(n.display_name() << ": " << e.what());
    }
    SY_CHECK(step.kernel, n.display_name() << ": kernel provider '" << def->provider << "' returned no kernel");
    for (ValueId in : n.inputs) step.inputs.push_back(in == kNoValue ? nullptr : &slots_[static_cast<size_t>(in)]);
    step.outputs = n.outputs;
    max_outputs = std::max(max_outputs, n.outputs.size());
    for (ValueId in : n.inputs)
      if (in != kNoValue && !pinned[static_cast<size_t>(in)] && last_use[static_cast<size_t>(in)] == static_cast<int>(s) &&
          std::find(step.release.begin(), step.release.end(), in) == step.release.end())
        step.release.push_back(in);
    // Outputs nobody reads are released right away.
    for (ValueId out : n.outputs)
      if (out != kNoValue && !pinned[static_cast<size_t>(out)] && last_use[static_cast<size_t>(out)] < 0)
        step.release.push_back(out);
    placements_.push_back(NodePlacement{n.name, op, def->provider});
    steps_.push_back(std::move(step));
  }
  if (!missing.empty()) {
    std::ostringstream os;
    os << "no " << device_name(options.device) << " kernel for " << missing.size() << " node(s):";
    for (const auto& m : missing) os << "\n  " << m;
    throw Error(os.str());
  }
  scratch_outputs_.resize(max_outputs);
  std::vector<int> uses = g.use_counts();
  for (ValueId in : g.inputs) input_used_.push_back(uses[static_cast<size_t>(in)] > 0);
}

Executor::~Executor() = default;

int Executor::input_index(const std::string& name) const {
  const Graph& g = *graph_;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.values[static_cast<size_t>(g.inputs[i])].name == name) return static_cast<int>(i);
  return -1;
}

int Executor::output_index(const std::string& name) const {
  const Graph& g = *graph_;
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i].name == name) return static_cast<int>(i);
  return -1;
}

void Executor::check_input(size_t i, const Tensor& t) const {
  const Value& v = graph_->values[static_cast<size_t>(graph_->inputs[i])];
  SY_CHECK(t.defined(), "graph input '" << v.name << "' was not provided");
  SY_CHECK(t.dtype() == v.dtype, "graph input '" << v.name << "' must be " << dtype_name(v.dtype) << ", got "
                                                 << dtype_name(t.dtype()));
  if (!v.shape) return;
  SY_CHECK(static_cast<int>(v.shape->size()) == t.rank(),
           "graph input '" << v.name << "' must have shape " << v.shape_str() << ", got " << t.shape().str());
  for (int d = 0; d < t.rank(); ++d) {
    const Dim& dim = (*v.shape)[static_cast<size_t>(d)];
    SY_CHECK(!dim.is_static() || dim.value == t.dim(d),
             "graph input '" << v.name << "' must have shape " << v.shape_str() << ", got " << t.shape().str());
  }
}

std::vector<Tensor> Executor::run(std::span<const Tensor> inputs, const void* step) {
  std::lock_guard<std::mutex> lock(run_mu_);
  const Graph& g = *graph_;
  SY_CHECK(inputs.size() == g.inputs.size(), "the graph takes " << g.inputs.size() << " inputs, " << inputs.size() << " given");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!input_used_[i] && !inputs[i].defined()) continue;
    check_input(i, inputs[i]);
    slots_[static_cast<size_t>(g.inputs[i])] = inputs[i];
  }
  // Drops every per-run tensor, whether the run finished or failed, so a
  // failed request leaves nothing behind for the next one.
  auto clear = [&] {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!g.values[i].constant) slots_[i] = Tensor();
    for (Tensor& t : scratch_outputs_) t = Tensor();
  };
  KernelContext ctx;
  ctx.pool = pool_.get();
  ctx.threads = threads_;
  ctx.step = step;
  ctx.outputs = scratch_outputs_.data();
  try {
    for (Step& s : steps_) {
      ctx.inputs = s.inputs.data();
      ctx.num_inputs = static_cast<int>(s.inputs.size());
      ctx.num_outputs = static_cast<int>(s.outputs.size());
      try {
        s.kernel->compute(ctx);
      } catch (const std::exception& e) {
        SY_THROW(g.nodes[static_cast<size_t>(s.node)].display_name() << ": " << e.what());
      }
      for (size_t i = 0; i < s.outputs.size(); ++i) {
        Tensor produced = std::exchange(scratch_outputs_[i], Tensor());
        if (s.outputs[i] == kNoValue) continue;
        SY_CHECK(produced.defined(),
                 g.nodes[static_cast<size_t>(s.node)].display_name() << ": kernel did not produce output " << i);
        slots_[static_cast<size_t>(s.outputs[i])] = std::move(produced);
      }
      for (ValueId v : s.release) slots_[static_cast<size_t>(v)] = Tensor();
    }
  } catch (...) {
    clear();
    throw;
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (const GraphOutput& o : g.outputs) out.push_back(slots_[static_cast<size_t>(o.value)]);
  clear();
  return out;
}

}  // namespace sy
