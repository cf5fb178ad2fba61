// Tensors, the buffer pool, broadcasting and the graph IR with its passes.
#include <gtest/gtest.h>

#include "kernels/kernel_util.h"
#include "passes/pass.h"
#include "runtime/executor.h"

namespace sy {
namespace {

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor v = t.reshaped(Shape{3, 2});
  EXPECT_EQ(v.data<float>(), t.data<float>());
  EXPECT_THROW(t.reshaped(Shape{4}), Error);
  EXPECT_THROW(Shape({1, 2, 3, 4, 5, 6, 7, 8, 9}), Error);
}

TEST(BufferPool, ReusesReleasedBuffersBySizeClass) {
  auto pool = BufferPool::create();
  void* first;
  {
    Tensor a = pool->allocate(DType::F32, Shape{100});
    first = a.raw();
  }
  Tensor b = pool->allocate(DType::F32, Shape{120});  // same power-of-two class (512 bytes)
  EXPECT_EQ(b.raw(), first);
  size_t held = pool->bytes_held();
  Tensor c = pool->allocate(DType::F32, Shape{100});  // b still alive: a new block
  EXPECT_NE(c.raw(), b.raw());
  EXPECT_GT(pool->bytes_held(), held);
}

TEST(BufferPool, TensorsMayOutliveThePool) {
  Tensor t;
  {
    auto pool = BufferPool::create();
    t = pool->allocate(DType::I64, Shape{4});
    t.data<int64_t>()[3] = 42;
  }
  EXPECT_EQ(t.data<int64_t>()[3], 42);  // under ASan: no use-after-free
}

TEST(Broadcast, CoalescesAndBroadcasts) {
  Shape a{2, 3, 4}, b{4};
  Broadcast bc({&a, &b}, "test");
  EXPECT_EQ(bc.out, (Shape{2, 3, 4}));
  EXPECT_EQ(bc.rank, 2);  // [6, 4]: a contiguous, b repeats per row
  Shape c{2, 1}, d{1, 3};
  Broadcast bc2({&c, &d}, "test");
  EXPECT_EQ(bc2.out, (Shape{2, 3}));
  Shape e{2, 3}, f{4, 3};
  EXPECT_THROW(Broadcast({&e, &f}, "test"), Error);
  Shape s{}, z{0, 5};
  Broadcast bc3({&s, &z}, "test");
  EXPECT_EQ(bc3.out.numel(), 0);
}

// x -> Neg -> a ; x -> Neg -> b (duplicate) ; Add(a, b) -> y ; plus a dead Exp.
Graph tiny_graph() {
  Graph g;
  Value x;
  x.name = "x";
  x.dtype = DType::F32;
  x.shape = std::vector<Dim>{Dim{2, {}}};
  x.is_graph_input = true;
  ValueId xi = g.add_value(x);
  g.inputs.push_back(xi);
  auto node = [&](const std::string& op, std::vector<ValueId> ins, const std::string& out) {
    Value v;
    v.name = out;
    v.dtype = DType::F32;
    ValueId o = g.add_value(v);
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = {o};
    g.add_node(std::move(n));
    return o;
  };
  ValueId a = node("Neg", {xi}, "a");
  ValueId b = node("Neg", {xi}, "b");
  ValueId y = node("Add", {a, b}, "y");
  node("Exp", {xi}, "unused");
  g.outputs.push_back(GraphOutput{"y", y});
  g.opsets[""] = 17;
  return g;
}

TEST(Passes, CseAndDeadNodeElimination) {
  Graph g = tiny_graph();
  ThreadPool threads(1);
  KernelRegistry reg = KernelRegistry::with_builtins();
  PassContext ctx{reg, &threads, {}};
  EXPECT_EQ(g.live_node_count(), 4u);
  simplify_graph(g, ctx);
  EXPECT_EQ(g.live_node_count(), 2u);  // one Neg, one Add
  Executor ex(std::make_shared<Graph>(g), reg, &threads);
  Tensor x = Tensor::from<float>(Shape{2}, {1.f, -2.f});
  auto out = ex.run(std::vector<Tensor>{x});
  EXPECT_EQ(out[0].data<float>()[0], -2.f);
  EXPECT_EQ(out[0].data<float>()[1], 4.f);
}

TEST(Passes, ConstantFoldingUsesTheKernels) {
  Graph g;
  ValueId c = g.add_constant("c", Tensor::from<float>(Shape{2}, {4.f, 9.f}));
  Value o;
  o.name = "o";
  ValueId oi = g.add_value(o);
  Node n;
  n.op_type = "Sqrt";
  n.inputs = {c};
  n.outputs = {oi};
  g.add_node(n);
  g.outputs.push_back(GraphOutput{"o", oi});
  g.opsets[""] = 17;
  ThreadPool threads(1);
  KernelRegistry reg = KernelRegistry::with_builtins();
  PassContext ctx{reg, &threads, {}};
  simplify_graph(g, ctx);
  EXPECT_EQ(g.live_node_count(), 0u);
  const Value& folded = g.values[static_cast<size_t>(g.outputs[0].value)];
  ASSERT_TRUE(folded.constant);
  EXPECT_EQ(folded.constant->data<float>()[1], 3.f);
}

TEST(Graph, CycleIsAnError) {
  Graph g = tiny_graph();
  // Make Neg read the Add's output: a cycle.
  g.nodes[0].inputs[0] = g.nodes[2].outputs[0];
  EXPECT_THROW(g.topological_order(), Error);
}

TEST(Executor, FailedRunLeavesExecutorUsable) {
  Graph g = tiny_graph();
  ThreadPool threads(1);
  KernelRegistry reg = KernelRegistry::with_builtins();
  Executor ex(std::make_shared<Graph>(g), reg, &threads);
  Tensor wrong = Tensor::from<float>(Shape{3}, {1.f, 2.f, 3.f});
  EXPECT_THROW(ex.run(std::vector<Tensor>{wrong}), Error);  // static dim 2 declared
  Tensor x = Tensor::from<float>(Shape{2}, {1.f, 1.f});
  EXPECT_EQ(ex.run(std::vector<Tensor>{x})[0].data<float>()[0], -2.f);
}

// A graph input whose dtype nothing recorded (the equivalence probe feeds
// intermediates of exports without value_info, which shape inference could
// not follow: optimum's SmolLM2 was refused with "must be undefined, got
// float32") takes the tensor it is fed.
TEST(Executor, InputOfUnrecordedDtypeTakesWhatItIsFed) {
  Graph g = tiny_graph();
  g.values[static_cast<size_t>(g.inputs[0])].dtype = DType::Undefined;
  ThreadPool threads(1);
  KernelRegistry reg = KernelRegistry::with_builtins();
  Executor ex(std::make_shared<Graph>(g), reg, &threads);
  Tensor x = Tensor::from<float>(Shape{2}, {1.f, 1.f});
  EXPECT_EQ(ex.run(std::vector<Tensor>{x})[0].data<float>()[0], -2.f);
}

TEST(Registry, PriorityAndProviderSelection) {
  KernelRegistry reg = KernelRegistry::with_builtins();
  KernelDef better;
  better.op_type = "Neg";
  better.priority = 10;
  better.provider = "fast";
  better.dtypes = {DType::F32};
  better.create = [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return nullptr; };
  reg.add(better);
  EXPECT_EQ(reg.find("", "Neg", Device::CPU, DType::F32)->provider, "fast");
  EXPECT_EQ(reg.find("", "Neg", Device::CPU, DType::I64)->provider, "builtin");  // dtype filter
  EXPECT_EQ(reg.find("", "Neg", Device::CPU, DType::F32, {"fast"})->provider, "builtin");  // forbidden
  EXPECT_EQ(reg.find("", "Neg", Device::CPU, DType::F32, {}, "builtin")->provider, "builtin");  // pinned
  EXPECT_EQ(reg.find("", "Neg", Device::CUDA, DType::F32), nullptr);
}

}  // namespace
}  // namespace sy
