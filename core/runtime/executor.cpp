#include "runtime/executor.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace sy {
namespace {

struct Placement {
  const KernelDef* def = nullptr;
  Device device = Device::CPU;
};

// Placement by kernel availability: the session's device when a kernel there
// takes this node (a view only where its input already lives), else the CPU.
Placement place(const KernelRegistry& registry, const Graph& g, const Node& n, const ExecutorOptions& options,
                const std::vector<Device>& home, DType* key) {
  auto pin = options.pinned_providers.find(n.op_type);
  const std::string pinned = pin == options.pinned_providers.end() ? std::string() : pin->second;
  if (options.device != Device::CPU) {
    const KernelDef* def = registry.find_for_node(g, n, options.device, options.forbidden_providers, pinned, key);
    const bool input_elsewhere = n.inputs.empty() || n.inputs[0] == kNoValue || home[static_cast<size_t>(n.inputs[0])] != options.device;
    if (def && !(def->follows_input && input_elsewhere)) return {def, options.device};
  }
  return {registry.find_for_node(g, n, Device::CPU, options.forbidden_providers, pinned, key), Device::CPU};
}

}  // namespace

Executor::Executor(std::shared_ptr<const Graph> graph, const KernelRegistry& registry, ThreadPool* threads,
                   ExecutorOptions options)
    : graph_(std::move(graph)), threads_(threads), pool_(BufferPool::create()), backend_(options.backend) {
  const Graph& g = *graph_;
  const bool on_device = options.device != Device::CPU;
  SY_CHECK(!on_device || (backend_ && backend_->kind() == options.device),
           "executor: no " << device_name(options.device) << " device backend was given");

  std::vector<NodeId> order = g.topological_order();
  std::vector<Device> home(g.values.size(), Device::CPU);  // where each value will live
  std::vector<std::string> missing;
  std::vector<PlannedNode> planned;
  size_t max_outputs = 1;
  for (NodeId id : order) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    DType key = DType::Undefined;
    const auto [def, device] = place(registry, g, n, options, home, &key);
    if (!def) {
      std::ostringstream os;
      os << op << " (opset " << g.opset(n.domain) << ", " << dtype_name(key) << ", node '" << n.name << "')";
      missing.push_back(os.str());
      continue;
    }
    for (ValueId o : n.outputs)
      if (o != kNoValue) home[static_cast<size_t>(o)] = device;
    Step step;
    step.node = id;
    step.device = device;
    try {
      step.kernel = def->create(KernelCreateInfo{g, n, g.opset(n.domain), device == Device::CPU ? nullptr : backend_.get()});
    } catch (const Error& e) {
      SY_THROW_KIND(e.kind(), n.display_name() << ": " << e.what());
    } catch (const std::exception& e) {
      SY_THROW_KIND(ErrorKind::PluginFailure, n.display_name() << ": " << e.what());
    }
    SY_CHECK(step.kernel, n.display_name() << ": kernel provider '" << def->provider << "' returned no kernel");
    step.outputs = n.outputs;
    max_outputs = std::max(max_outputs, n.outputs.size());
    PlannedNode pn{n.inputs, n.outputs, device, std::vector<InputUse>(n.inputs.size(), InputUse::Data)};
    for (int i : def->host_inputs)
      if (i >= 0 && static_cast<size_t>(i) < pn.uses.size()) pn.uses[static_cast<size_t>(i)] = InputUse::HostData;
    for (int i : def->shape_inputs)
      if (i >= 0 && static_cast<size_t>(i) < pn.uses.size()) pn.uses[static_cast<size_t>(i)] = InputUse::ShapeOnly;
    planned.push_back(std::move(pn));
    placements_.push_back(NodePlacement{n.name, op, def->provider, device, def->capabilities});
    steps_.push_back(std::move(step));
  }
  if (!missing.empty()) {
    std::ostringstream os;
    os << "no " << device_name(options.device) << (on_device ? " or cpu" : "") << " kernel for " << missing.size()
       << " node(s):";
    for (const auto& m : missing) os << "\n  " << m;
    throw Error(os.str(), ErrorKind::Unsupported);
  }

  std::vector<bool> constant(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) constant[i] = g.values[i].constant.has_value();
  std::vector<ValueId> outputs;
  for (const GraphOutput& o : g.outputs) outputs.push_back(o.value);
  plan_ = plan_transfers(g.values.size(), constant, outputs, planned);

  slots_.resize(static_cast<size_t>(plan_.num_slots));
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].constant) slots_[i] = *g.values[i].constant;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int slot : plan_.input_slots[s]) steps_[s].inputs.push_back(slot < 0 ? nullptr : &slots_[static_cast<size_t>(slot)]);
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
  SY_CHECK(t.on_host(), "graph input '" << v.name << "' must be in host memory");
  // Undefined: a value whose type nothing recorded (an export without
  // value_info that shape inference could not follow), fed by the probe.
  SY_CHECK(v.dtype == DType::Undefined || t.dtype() == v.dtype,
           "graph input '" << v.name << "' must be " << dtype_name(v.dtype) << ", got " << dtype_name(t.dtype()));
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
      if (i >= g.values.size() || !g.values[i].constant) slots_[i] = Tensor();
    for (Tensor& t : scratch_outputs_) t = Tensor();
  };
  KernelContext ctx;
  ctx.pool = pool_.get();
  ctx.threads = threads_;
  ctx.step = step;
  ctx.outputs = scratch_outputs_.data();
  ctx.backend = backend_.get();
  try {
    for (size_t si = 0; si < steps_.size(); ++si) {
      Step& s = steps_[si];
      for (const Transfer& t : plan_.before[si]) copy(t);
      ctx.device = s.device;
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
        SY_CHECK(produced.device() == s.device, g.nodes[static_cast<size_t>(s.node)].display_name()
                                                    << ": kernel produced output " << i << " on " << device_name(produced.device())
                                                    << " but runs on " << device_name(s.device));
        slots_[static_cast<size_t>(s.outputs[i])] = std::move(produced);
      }
      for (int slot : plan_.release[si]) slots_[static_cast<size_t>(slot)] = Tensor();
    }
    for (const Transfer& t : plan_.outputs_to_host) copy(t);
  } catch (...) {
    clear();
    throw;
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (int slot : plan_.output_slots) out.push_back(slots_[static_cast<size_t>(slot)]);
  clear();
  return out;
}

void Executor::copy(const Transfer& t) {
  const Tensor& src = slots_[static_cast<size_t>(t.from_slot)];
  Tensor& dst = slots_[static_cast<size_t>(t.to_slot)];
  if (!src.defined()) return;  // an optional value no one produced
  dst = t.to == Device::CPU ? backend_->to_host(src) : backend_->to_device(src);
}

}  // namespace sy
