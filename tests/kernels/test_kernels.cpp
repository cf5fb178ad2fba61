// Every built-in kernel against ONNX Runtime: one single-op model per case
// (tests/generators/gen_kernel_cases.py), imported and run by the engine.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/onnx_import.h"
#include "plugin_host/plugin_host.h"
#include "runtime/executor.h"
#include "test_support.h"

namespace sy {
namespace {

DType parse_dtype(const std::string& s) {
  static const std::map<std::string, DType> m = {{"float32", DType::F32}, {"float64", DType::F64}, {"int64", DType::I64},
                                                 {"int32", DType::I32},   {"bool", DType::Bool},    {"float16", DType::F16},
                                                 {"uint8", DType::U8},    {"int8", DType::I8}};
  return m.at(s);
}

// float -> IEEE half for values that are exactly representable as normal
// halves or zero (the generator draws its float16 inputs that way).
uint16_t exact_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  if ((x & 0x7fffffff) == 0) return sign;
  int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0 || exp >= 31 || (x & 0x1fff)) throw std::runtime_error("test: float16 input not exactly representable");
  return static_cast<uint16_t>(sign | exp << 10 | ((x >> 13) & 0x3ff));
}

// A number, or "nan" / "inf" / "-inf" (JSON has no such numbers).
double number(const nlohmann::json& v) {
  if (!v.is_string()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "nan") return NAN;
  return s[0] == '-' ? -INFINITY : INFINITY;
}

Tensor from_json(const nlohmann::json& j) {
  DType t = parse_dtype(j["dtype"]);
  Shape shape(j["shape"].get<std::vector<int64_t>>());
  Tensor out = Tensor::empty(t, shape);
  const auto& d = j["data"];
  for (size_t i = 0; i < d.size(); ++i) {
    switch (t) {
      case DType::F32: out.data<float>()[i] = static_cast<float>(number(d[i])); break;
      case DType::F64: out.data<double>()[i] = number(d[i]); break;
      case DType::I64: out.data<int64_t>()[i] = d[i].get<int64_t>(); break;
      case DType::I32: out.data<int32_t>()[i] = d[i].get<int32_t>(); break;
      case DType::Bool: out.data<bool>()[i] = d[i].get<int64_t>() != 0; break;
      case DType::U8: out.data<uint8_t>()[i] = d[i].get<uint8_t>(); break;
      case DType::I8: out.data<int8_t>()[i] = d[i].get<int8_t>(); break;
      case DType::F16: out.data<uint16_t>()[i] = exact_half(d[i].get<float>()); break;
      default: throw std::runtime_error("test: unsupported input dtype");
    }
  }
  return out;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data<float>()[i];
    case DType::F64: return t.data<double>()[i];
    case DType::I64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::I32: return t.data<int32_t>()[i];
    case DType::Bool: return t.data<bool>()[i];
    case DType::U8: return t.data<uint8_t>()[i];
    case DType::I8: return t.data<int8_t>()[i];
    case DType::F16: {
      // Compare half results through a Cast to float32 of the engine's own.
      uint16_t h = t.data<uint16_t>()[i];
      uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
      if (exp == 0) return (sign ? -1.0 : 1.0) * std::ldexp(static_cast<double>(mant), -24);
      if (exp == 31) return mant ? NAN : (sign ? -INFINITY : INFINITY);
      return (sign ? -1.0 : 1.0) * std::ldexp(1.0 + mant / 1024.0, static_cast<int>(exp) - 15);
    }
    default: throw std::runtime_error("test: unsupported output dtype");
  }
}

// Read at static-initialisation time to instantiate one test per case; a
// missing file yields no cases and CasesExist fails instead of a crash.
std::vector<nlohmann::json> load_cases() {
  try {
    auto j = test::read_json(std::string(SWITCHYARD_KERNEL_CASES_DIR) + "/cases.json");
    return j["cases"].get<std::vector<nlohmann::json>>();
  } catch (const std::exception&) {
    return {};
  }
}

TEST(KernelCases, CasesExist) {
  // Every op family of the list is covered, broadcasting, negative
  // axes and empty tensors included.
  auto cases = load_cases();
  ASSERT_GE(cases.size(), 140u) << "run tests/generators/gen_kernel_cases.py (needs onnx, onnxruntime, numpy)";
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : load_cases()) names.push_back(c["name"]);
  return names;
}

nlohmann::json case_named(const std::string& name) {
  for (const auto& c : load_cases())
    if (c["name"] == name) return c;
  throw std::runtime_error("no kernel case " + name);
}

class KernelCase : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelCase, MatchesOnnxRuntime) {
  const auto c = case_named(GetParam());
  std::string dir = SWITCHYARD_KERNEL_CASES_DIR;
  auto graph = std::make_shared<Graph>(import_onnx_file(dir + "/" + c["model"].get<std::string>()));
  ThreadPool threads(2);
  KernelRegistry reg = KernelRegistry::with_builtins();
  ComponentRegistry components = ComponentRegistry::with_builtins();
  HostContext ctx{&threads, nullptr};
  PluginHost plugins(reg, components, &ctx);
  // Contrib-op cases run on the real plugin library.
  if (c.contains("plugin") && c["plugin"] == "contrib") plugins.load(SY_CONTRIB_PLUGIN);
  Executor ex(graph, reg, &threads);
  std::vector<Tensor> inputs(graph->inputs.size());
  for (const auto& in : c["inputs"]) {
    int idx = ex.input_index(in["name"]);
    ASSERT_GE(idx, 0) << in["name"];
    inputs[static_cast<size_t>(idx)] = from_json(in);
  }
  std::vector<Tensor> outs = ex.run(inputs);
  double tol = c["tolerance"];
  for (const auto& expected : c["outputs"]) {
    int idx = ex.output_index(expected["name"]);
    ASSERT_GE(idx, 0);
    const Tensor& got = outs[static_cast<size_t>(idx)];
    EXPECT_EQ(got.dtype(), parse_dtype(expected["dtype"])) << c["name"];
    ASSERT_EQ(got.shape(), Shape(expected["shape"].get<std::vector<int64_t>>()))
        << c["name"] << ": got " << got.shape().str();
    const auto& data = expected["data"];
    for (int64_t i = 0; i < got.numel(); ++i) {
      double want = number(data[static_cast<size_t>(i)]), have = element(got, i);
      if (std::isinf(want)) {
        EXPECT_EQ(have, want) << c["name"] << " element " << i;
        continue;
      }
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(have)) << c["name"] << " element " << i;
        continue;
      }
      ASSERT_LE(std::abs(have - want), tol * (1 + std::abs(want)))
          << c["name"] << " element " << i << ": engine " << have << ", onnxruntime " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ort, KernelCase, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& case_info) { return case_info.param; });

}  // namespace
}  // namespace sy
