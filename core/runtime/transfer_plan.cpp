#include "runtime/transfer_plan.h"

#include <algorithm>
#include <map>

namespace sy {

int TransferPlan::copies_per_run() const {
  size_t n = outputs_to_host.size();
  for (const auto& b : before) n += b.size();
  return static_cast<int>(n);
}

TransferPlan plan_transfers(size_t num_values, const std::vector<bool>& constant, const std::vector<ValueId>& graph_outputs,
                            const std::vector<PlannedNode>& steps) {
  TransferPlan plan;
  plan.num_slots = static_cast<int>(num_values);
  plan.before.resize(steps.size());
  plan.input_slots.resize(steps.size());
  plan.release.resize(steps.size());

  std::vector<Device> home(num_values, Device::CPU);
  std::map<std::pair<ValueId, Device>, int> mirror;
  // Last step reading each slot (-1: never read); grows with the mirrors.
  std::vector<int> last_read(num_values, -1);
  auto read = [&](int slot, int step) {
    if (static_cast<size_t>(slot) >= last_read.size()) last_read.resize(static_cast<size_t>(slot) + 1, -1);
    last_read[static_cast<size_t>(slot)] = step;
  };

  for (size_t s = 0; s < steps.size(); ++s) {
    const PlannedNode& n = steps[s];
    const int step = static_cast<int>(s);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      if (v == kNoValue) {
        plan.input_slots[s].push_back(-1);
        continue;
      }
      const InputUse use = i < n.uses.size() ? n.uses[i] : InputUse::Data;
      const Device want = use == InputUse::HostData ? Device::CPU : n.device;
      const size_t vi = static_cast<size_t>(v);
      int slot = v;
      if (!constant[vi] && use != InputUse::ShapeOnly && home[vi] != want) {
        auto [it, fresh] = mirror.try_emplace({v, want}, plan.num_slots);
        if (fresh) {
          ++plan.num_slots;
          plan.before[s].push_back(Transfer{v, it->second, want});
          read(v, step);
        }
        slot = it->second;
      }
      read(slot, step);
      plan.input_slots[s].push_back(slot);
    }
    for (ValueId o : n.outputs)
      if (o != kNoValue) home[static_cast<size_t>(o)] = n.device;
  }

  std::vector<bool> pinned(static_cast<size_t>(plan.num_slots), false);
  for (size_t v = 0; v < num_values; ++v) pinned[v] = constant[v];
  for (ValueId o : graph_outputs) {
    const size_t oi = static_cast<size_t>(o);
    pinned[oi] = true;
    if (home[oi] == Device::CPU || constant[oi]) {
      plan.output_slots.push_back(o);
      continue;
    }
    auto [it, fresh] = mirror.try_emplace({o, Device::CPU}, plan.num_slots);
    if (fresh) {
      ++plan.num_slots;
      pinned.push_back(true);
      plan.outputs_to_host.push_back(Transfer{o, it->second, Device::CPU});
    } else {
      pinned[static_cast<size_t>(it->second)] = true;
    }
    plan.output_slots.push_back(it->second);
  }
  last_read.resize(static_cast<size_t>(plan.num_slots), -1);

  for (size_t s = 0; s < steps.size(); ++s) {
    auto& rel = plan.release[s];
    auto release_if_last = [&](int slot) {
      if (slot < 0 || pinned[static_cast<size_t>(slot)] || last_read[static_cast<size_t>(slot)] != static_cast<int>(s)) return;
      if (std::find(rel.begin(), rel.end(), slot) == rel.end()) rel.push_back(slot);
    };
    for (const Transfer& t : plan.before[s]) release_if_last(t.from_slot);
    for (int slot : plan.input_slots[s]) release_if_last(slot);
    // Outputs nobody reads are released right away.
    for (ValueId o : steps[s].outputs)
      if (o != kNoValue && !pinned[static_cast<size_t>(o)] && last_read[static_cast<size_t>(o)] < 0) rel.push_back(o);
  }
  return plan;
}

}  // namespace sy
