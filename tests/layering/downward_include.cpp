// The control for upward_include.cpp: compiled as part of the passes layer,
// a header of a layer below (graph) is found.
#include "graph/graph.h"
#include "passes/pass.h"
