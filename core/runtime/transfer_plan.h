// Where each value lives and which copies a run needs, decided once when the
// executor is planned. Pure bookkeeping over value ids (no tensors, no
// devices opened), so it is tested on machines without a GPU.
//
// Rules:
//  - graph inputs and constants live on the host; a node's outputs live on
//    the device its kernel runs on;
//  - constant inputs are always read on the host: a device kernel copies
//    (and converts, and repacks) the weights it needs once, at creation, so
//    weights never exist twice on the device;
//  - inputs a kernel declares host inputs are read on the host, and inputs it
//    reads only the shape of are read where they live, without a copy;
//  - a node that reads a value living elsewhere reads a mirror slot, filled
//    by one copy just before the first node on that device that reads it;
//    later readers on that device share the copy;
//  - graph outputs living on a device are copied to the host after the last
//    step;
//  - every slot is released after its last reader (a copy reads its source),
//    except constants and graph outputs.
#pragma once
#include <vector>

#include "base/device.h"
#include "graph/graph.h"

namespace sy {

// How a node reads an input: its data on the node's device (the default),
// its data on the host, or only its shape (read wherever the value lives).
enum class InputUse { Data, HostData, ShapeOnly };

struct PlannedNode {
  std::vector<ValueId> inputs;   // kNoValue for omitted optional inputs
  std::vector<ValueId> outputs;  // kNoValue for unused optional outputs
  Device device = Device::CPU;
  std::vector<InputUse> uses;    // per input; empty = all Data
};

struct Transfer {
  int from_slot;
  int to_slot;
  Device to;
};

struct TransferPlan {
  int num_slots = 0;                          // value ids first, then mirrors
  std::vector<std::vector<Transfer>> before;  // per step: copies to make before it runs
  std::vector<std::vector<int>> input_slots;  // per step, per input: the slot it reads (-1: omitted)
  std::vector<std::vector<int>> release;      // per step: slots dead after it
  std::vector<Transfer> outputs_to_host;      // after the last step
  std::vector<int> output_slots;              // per graph output: the slot holding it on the host
  int copies_per_run() const;
};

// `constant[v]` says value v is a constant; `graph_outputs` in output order.
TransferPlan plan_transfers(size_t num_values, const std::vector<bool>& constant, const std::vector<ValueId>& graph_outputs,
                            const std::vector<PlannedNode>& steps);

}  // namespace sy
