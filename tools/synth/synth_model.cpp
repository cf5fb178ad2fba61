#include "synth/synth_model.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "facade/engine.h"

namespace sy {

const std::vector<SynthConfig>& synth_presets() {
  static const std::vector<SynthConfig> presets = {
      {"tiny", 64, 2, 4, 2, 128, 512, 2048, false, 0, 0},
      {"15m", 288, 6, 6, 6, 768, 32000, 2048, true, 0, 0},
      {"42m", 512, 8, 8, 8, 1376, 32000, 2048, true, 0, 0},
      {"110m", 768, 12, 12, 12, 2048, 32000, 2048, true, 0, 0},
      {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, false, 0, 0},
      {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, false, 0, 0},
      {"moe-tiny", 64, 2, 4, 2, 32, 512, 2048, false, 4, 2},
      {"moe-small", 512, 8, 8, 2, 1024, 32000, 2048, true, 16, 2},
      // Qwen3-30B-A3B's layer: 128 experts of width 768, 8 per token, on a
      // 2048-wide residual with 32 query and 4 KV heads; two layers of its 48.
      {"qwen3-30b-a3b-2l", 2048, 2, 32, 4, 768, 151936, 4096, false, 128, 8},
  };
  return presets;
}

const SynthConfig& synth_preset(const std::string& name) {
  for (const auto& p : synth_presets())
    if (p.name == name) return p;
  std::ostringstream os;
  os << "unknown synth preset '" << name << "'; presets:";
  for (const auto& p : synth_presets()) os << " " << p.name;
  throw Error(os.str());
}

namespace {

int64_t parameters(const SynthConfig& c, int64_t experts_counted) {
  int64_t hd = c.dim / c.heads, kv = c.kv_heads * hd;
  int64_t mlp = c.experts > 0 ? c.dim * c.experts + experts_counted * 3 * c.dim * c.hidden : 3 * c.dim * c.hidden;
  int64_t per_layer = 2 * c.dim + c.dim * c.dim * 2 + 2 * c.dim * kv + mlp;
  return c.vocab * c.dim * (c.tied_classifier ? 1 : 2) + c.layers * per_layer + c.dim;
}

}  // namespace

int64_t synth_parameter_count(const SynthConfig& c) { return parameters(c, c.experts); }

int64_t synth_active_parameter_count(const SynthConfig& c) {
  // The embedding table is read one row a token; a tied one is the head too.
  return parameters(c, c.experts_per_token) - (c.tied_classifier ? 0 : c.vocab * c.dim);
}

namespace {

using onnx::TensorProto;

class Builder {
 public:
  Builder(const SynthConfig& c, uint64_t seed, std::ofstream* ext, const std::string& ext_name)
      : state_(seed * 0x9e3779b97f4a7c15ull + 1), ext_(ext), ext_name_(ext_name) {
    g_ = model_.mutable_graph();
    g_->set_name("synth_" + c.name);
  }

  std::string node(const std::string& op, const std::vector<std::string>& in, const std::string& name, int outputs = 1,
                   std::vector<std::string>* outs = nullptr) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    std::string first;
    for (int k = 0; k < outputs; ++k) {
      std::string o = name + (outputs > 1 ? "_out" + std::to_string(k) : "_out");
      n->add_output(o);
      if (k == 0) first = o;
      if (outs) outs->push_back(o);
    }
    last_ = n;
    return first;
  }
  void attr_int(const std::string& k, int64_t v) {
    auto* a = last_->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void attr_ints(const std::string& k, const std::vector<int64_t>& v) {
    auto* a = last_->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return name;
  }
  std::string int_scalar(const std::string& name, int64_t v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    t->add_int64_data(v);
    return name;
  }
  std::string scalar(const std::string& name, float v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    t->add_float_data(v);
    return name;
  }
  std::string floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    place(t, v);
    return name;
  }
  // Deterministic N(mean, std^2) weights (xorshift + Box-Muller).
  std::string random(const std::string& name, const std::vector<int64_t>& dims, float mean, float std) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += 2) {
      double u1 = (static_cast<double>(next() >> 11) + 1.0) / 9007199254740993.0, u2 = static_cast<double>(next() >> 11) / 9007199254740992.0;
      double r = std::sqrt(-2.0 * std::log(u1));
      v[static_cast<size_t>(i)] = mean + std * static_cast<float>(r * std::cos(6.283185307179586 * u2));
      if (i + 1 < n) v[static_cast<size_t>(i + 1)] = mean + std * static_cast<float>(r * std::sin(6.283185307179586 * u2));
    }
    return floats(name, dims, v);
  }
  void input(const std::string& name, int32_t type, const std::vector<std::string>& dims) { io(g_->add_input(), name, type, dims); }
  void output(const std::string& name, int32_t type, const std::vector<std::string>& dims) { io(g_->add_output(), name, type, dims); }
  // Renames the output of the last node (graph outputs carry fixed names).
  void rename_last_output(const std::string& to) { last_->set_output(0, to); }
  onnx::ModelProto& model() { return model_; }

 private:
  uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  void place(TensorProto* t, const std::vector<float>& v) {
    size_t bytes = v.size() * sizeof(float);
    if (ext_ && bytes >= 1024) {
      auto offset = static_cast<int64_t>(ext_->tellp());
      ext_->write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(bytes));
      t->set_data_location(TensorProto::EXTERNAL);
      auto add = [&](const std::string& k, const std::string& val) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(val);
      };
      add("location", ext_name_);
      add("offset", std::to_string(offset));
      add("length", std::to_string(bytes));
    } else {
      t->set_raw_data(v.data(), bytes);
    }
  }
  static void io(onnx::ValueInfoProto* vi, const std::string& name, int32_t type, const std::vector<std::string>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (const auto& d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
      else dim->set_dim_param(d);
    }
  }

  uint64_t state_;
  std::ofstream* ext_;
  std::string ext_name_;
  onnx::ModelProto model_;
  onnx::GraphProto* g_;
  onnx::NodeProto* last_ = nullptr;
};

}  // namespace

void write_synth_model(const SynthConfig& c, const std::string& path, uint64_t seed) {
  SY_CHECK(c.dim % c.heads == 0 && c.heads % c.kv_heads == 0 && (c.dim / c.heads) % 2 == 0,
           "synth " << c.name << ": dim must split into an even head size and heads into kv-head groups");
  const int64_t D = c.dim / c.heads, H = c.heads, KVH = c.kv_heads, rep = H / KVH;
  bool external = synth_parameter_count(c) * 4 > (1LL << 30);
  std::string ext_name = std::filesystem::path(path).filename().string() + ".data";
  std::ofstream ext;
  if (external) {
    ext.open(std::filesystem::path(path).string() + ".data", std::ios::binary | std::ios::trunc);
    SY_CHECK(ext, path << ".data: cannot write");
  }
  Builder b(c, seed, external ? &ext : nullptr, ext_name);
  const std::string T = "past_sequence_length + sequence_length";
  b.input("input_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
  b.input("attention_mask", TensorProto::INT64, {"batch_size", T});
  b.input("position_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
  for (int64_t l = 0; l < c.layers; ++l)
    for (const char* kv : {"key", "value"})
      b.input("past_key_values." + std::to_string(l) + "." + kv, TensorProto::FLOAT,
              {"batch_size", std::to_string(KVH), "past_sequence_length", std::to_string(D)});

  std::string emb = b.random("tok_emb.weight", {c.vocab, c.dim}, 0.f, 1.f);
  std::string x = b.node("Gather", {emb, "input_ids"}, "/tok_emb/Gather");
  // RoPE tables from position_ids: theta^(-2i/D), adjacent pairs.
  std::vector<float> inv_freq(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[static_cast<size_t>(i)] = std::pow(10000.f, -2.f * static_cast<float>(i) / static_cast<float>(D));
  std::string pos = b.node("Unsqueeze", {"position_ids", b.ints("/rope/axes2", {2})}, "/rope/Unsqueeze");
  pos = b.node("Cast", {pos}, "/rope/Cast");
  b.attr_int("to", TensorProto::FLOAT);
  std::string ang = b.node("Mul", {pos, b.floats("/rope/inv_freq", {D / 2}, inv_freq)}, "/rope/Mul");
  std::string cos = b.node("Unsqueeze", {b.node("Cos", {ang}, "/rope/Cos"), b.ints("/rope/axes1", {1})}, "/rope/Unsqueeze_cos");
  std::string sin = b.node("Unsqueeze", {b.node("Sin", {ang}, "/rope/Sin"), b.ints("/rope/axes1b", {1})}, "/rope/Unsqueeze_sin");
  // Mask [B, 1, S, T]: key j visible to query i when j <= past + i and attention_mask[j] == 1.
  std::string one = b.ints("/mask/one", {1}), zero = b.ints("/mask/zero", {0});
  std::string t_len = b.node("Gather", {b.node("Shape", {"attention_mask"}, "/mask/ShapeM"), one}, "/mask/GatherT");
  std::string s_len = b.node("Gather", {b.node("Shape", {"input_ids"}, "/mask/ShapeI"), one}, "/mask/GatherS");
  std::string t_scalar = b.node("Squeeze", {t_len, zero}, "/mask/SqueezeT");
  std::string s_scalar = b.node("Squeeze", {s_len, zero}, "/mask/SqueezeS");
  std::string zero_s = b.int_scalar("/mask/zero_s", 0), one_s = b.int_scalar("/mask/one_s", 1);
  std::string kpos = b.node("Range", {zero_s, t_scalar, one_s}, "/mask/RangeK");
  std::string qpos = b.node("Add", {b.node("Range", {zero_s, s_scalar, one_s}, "/mask/RangeQ"), b.node("Sub", {t_scalar, s_scalar}, "/mask/Past")}, "/mask/AddQ");
  std::string causal = b.node("LessOrEqual", {b.node("Unsqueeze", {kpos, zero}, "/mask/UnsqK"), b.node("Unsqueeze", {qpos, one}, "/mask/UnsqQ")}, "/mask/Causal");
  std::string real = b.node("Equal", {"attention_mask", b.ints("/mask/one_v", {1})}, "/mask/Real");
  real = b.node("Unsqueeze", {real, b.ints("/mask/axes12", {1, 2})}, "/mask/UnsqReal");
  std::string visible = b.node("And", {causal, real}, "/mask/And");
  std::string mask = b.node("Where", {visible, b.scalar("/mask/zero_f", 0.f), b.scalar("/mask/min_f", -3.4028234663852886e38f)}, "/mask/Where");

  auto rmsnorm = [&](const std::string& in, const std::string& w, const std::string& p) {
    std::string sq = b.node("Pow", {in, b.scalar(p + "/two", 2.f)}, p + "/Pow");
    std::string mean = b.node("ReduceMean", {sq}, p + "/ReduceMean");
    b.attr_ints("axes", {-1});
    b.attr_int("keepdims", 1);
    std::string denom = b.node("Sqrt", {b.node("Add", {mean, b.scalar(p + "/eps", 1e-5f)}, p + "/Add")}, p + "/Sqrt");
    std::string inv = b.node("Div", {b.scalar(p + "/one", 1.f), denom}, p + "/Div");
    return b.node("Mul", {b.node("Mul", {in, inv}, p + "/Mul"), w}, p + "/Mul_1");
  };
  auto heads = [&](const std::string& in, int64_t n, const std::string& p) {
    std::string r = b.node("Reshape", {in, b.ints(p + "/shape", {0, 0, n, D})}, p + "/Reshape");
    std::string t = b.node("Transpose", {r}, p + "/Transpose");
    b.attr_ints("perm", {0, 2, 1, 3});
    return t;
  };
  auto rope = [&](const std::string& in, const std::string& p) {
    std::string ax = b.ints(p + "/ax", {3}), st = b.ints(p + "/st", {2}), end = b.ints(p + "/end", {D});
    std::string ev = b.node("Slice", {in, b.ints(p + "/s0", {0}), end, ax, st}, p + "/Slice");
    std::string od = b.node("Slice", {in, b.ints(p + "/s1", {1}), end, ax, st}, p + "/Slice_1");
    std::string re = b.node("Sub", {b.node("Mul", {ev, cos}, p + "/Mul"), b.node("Mul", {od, sin}, p + "/Mul_1")}, p + "/Sub");
    std::string ro = b.node("Add", {b.node("Mul", {ev, sin}, p + "/Mul_2"), b.node("Mul", {od, cos}, p + "/Mul_3")}, p + "/Add");
    std::string last = b.ints(p + "/last", {-1});
    std::string cat = b.node("Concat", {b.node("Unsqueeze", {re, last}, p + "/Unsqueeze"), b.node("Unsqueeze", {ro, last}, p + "/Unsqueeze_1")}, p + "/Concat");
    b.attr_int("axis", -1);
    return b.node("Reshape", {cat, b.ints(p + "/shape", {0, 0, 0, D})}, p + "/Reshape");
  };
  auto repeat = [&](const std::string& kv, const std::string& p) {
    if (rep == 1) return kv;
    std::string u = b.node("Unsqueeze", {kv, b.ints(p + "/ax", {2})}, p + "/Unsqueeze");
    std::string e = b.node("Expand", {u, b.ints(p + "/shape", {1, 1, rep, 1, 1})}, p + "/Expand");
    return b.node("Reshape", {e, b.ints(p + "/shape2", {0, H, -1, D})}, p + "/Reshape");
  };
  const float fan_in = 1.f / std::sqrt(static_cast<float>(c.dim));
  // The mixture of experts as transformers' batched experts export it:
  // softmax router, TopK, weights renormalised; every (token, choice)
  // entry gathers its expert's matrices and multiplies ([entries, 1, dim]
  // rows); the weighted results summed over the choices.
  auto experts = [&](const std::string& h, const std::string& p, const std::string& w, float in_std, float out_std) {
    const int64_t E = c.experts, k = c.experts_per_token, I = c.hidden;
    std::string router = b.node("MatMul", {h, b.random(w + ".router", {c.dim, E}, 0.f, in_std)}, p + "/router/MatMul");
    std::string probs = b.node("Softmax", {router}, p + "/router/Softmax");
    b.attr_int("axis", -1);
    std::vector<std::string> top;
    b.node("TopK", {probs, b.ints(p + "/k", {k})}, p + "/router/TopK", 2, &top);
    b.attr_int("axis", -1);
    std::string sum = b.node("ReduceSum", {top[0], b.ints(p + "/last", {-1})}, p + "/router/ReduceSum");
    b.attr_int("keepdims", 1);
    std::string weights = b.node("Div", {top[0], sum}, p + "/router/Div");
    std::string idx = b.node("Reshape", {top[1], b.ints(p + "/flat", {-1})}, p + "/experts/Reshape_idx");
    std::string rows = b.node("Unsqueeze", {h, b.ints(p + "/ax2", {2})}, p + "/experts/Unsqueeze");
    rows = b.node("Expand", {rows, b.ints(p + "/choices", {1, 1, k, 1})}, p + "/experts/Expand");
    rows = b.node("Reshape", {rows, b.ints(p + "/rows", {-1, 1, c.dim})}, p + "/experts/Reshape_rows");
    auto expert_matmul = [&](const std::string& in, const std::string& name, int64_t K, int64_t N, float std_dev) {
      std::string gathered = b.node("Gather", {b.random(w + ".experts." + name, {E, K, N}, 0.f, std_dev), idx}, p + "/experts/" + name + "/Gather");
      b.attr_int("axis", 0);
      return b.node("MatMul", {in, gathered}, p + "/experts/" + name + "/MatMul");
    };
    std::string gate = expert_matmul(rows, "gate", c.dim, I, in_std);
    std::string up = expert_matmul(rows, "up", c.dim, I, in_std);
    std::string act = b.node("Mul", {b.node("Mul", {gate, b.node("Sigmoid", {gate}, p + "/experts/Sigmoid")}, p + "/experts/Mul_silu"), up},
                             p + "/experts/Mul_gate");
    std::string down = expert_matmul(act, "down", I, c.dim, out_std);
    std::string scaled = b.node("Mul", {down, b.node("Reshape", {weights, b.ints(p + "/wshape", {-1, 1, 1})}, p + "/experts/Reshape_w")},
                                p + "/experts/Mul_w");
    std::string shape = b.node("Concat", {b.node("Shape", {top[1]}, p + "/experts/Shape"), b.ints(p + "/dim", {c.dim})}, p + "/experts/Concat");
    b.attr_int("axis", 0);
    std::string per_choice = b.node("Reshape", {scaled, shape}, p + "/experts/Reshape_out");
    std::string y = b.node("ReduceSum", {per_choice, b.ints(p + "/ax2r", {2})}, p + "/experts/ReduceSum");
    b.attr_int("keepdims", 0);
    return y;
  };
  for (int64_t l = 0; l < c.layers; ++l) {
    std::string p = "/layers." + std::to_string(l), w = "layers." + std::to_string(l);
    std::string h = rmsnorm(x, b.random(w + ".attn_norm.weight", {c.dim}, 1.f, 0.1f), p + "/attn_norm");
    std::string q = b.node("MatMul", {h, b.random(w + ".wq", {c.dim, H * D}, 0.f, fan_in)}, p + "/wq/MatMul");
    std::string k = b.node("MatMul", {h, b.random(w + ".wk", {c.dim, KVH * D}, 0.f, fan_in)}, p + "/wk/MatMul");
    std::string v = b.node("MatMul", {h, b.random(w + ".wv", {c.dim, KVH * D}, 0.f, fan_in)}, p + "/wv/MatMul");
    std::string qr = rope(heads(q, H, p + "/q"), p + "/q_rope");
    std::string kr = rope(heads(k, KVH, p + "/k"), p + "/k_rope");
    std::string vh = heads(v, KVH, p + "/v");
    std::string pk = "present." + std::to_string(l) + ".key", pv = "present." + std::to_string(l) + ".value";
    b.node("Concat", {"past_key_values." + std::to_string(l) + ".key", kr}, p + "/Concat_k");
    b.attr_int("axis", 2);
    b.rename_last_output(pk);
    b.node("Concat", {"past_key_values." + std::to_string(l) + ".value", vh}, p + "/Concat_v");
    b.attr_int("axis", 2);
    b.rename_last_output(pv);
    std::string kt = b.node("Transpose", {repeat(pk, p + "/rep_k")}, p + "/Transpose_k");
    b.attr_ints("perm", {0, 1, 3, 2});
    std::string scores = b.node("MatMul", {qr, kt}, p + "/MatMul");
    scores = b.node("Div", {scores, b.scalar(p + "/sqrt_d", std::sqrt(static_cast<float>(D)))}, p + "/Div");
    scores = b.node("Add", {scores, mask}, p + "/Add_mask");
    std::string probs = b.node("Softmax", {scores}, p + "/Softmax");
    b.attr_int("axis", -1);
    std::string attn = b.node("MatMul", {probs, repeat(pv, p + "/rep_v")}, p + "/MatMul_1");
    attn = b.node("Transpose", {attn}, p + "/Transpose_o");
    b.attr_ints("perm", {0, 2, 1, 3});
    attn = b.node("Reshape", {attn, b.ints(p + "/o_shape", {0, 0, H * D})}, p + "/Reshape_o");
    float out_std = fan_in / std::sqrt(2.f * static_cast<float>(c.layers));
    attn = b.node("MatMul", {attn, b.random(w + ".wo", {H * D, c.dim}, 0.f, out_std)}, p + "/wo/MatMul");
    x = b.node("Add", {x, attn}, p + "/Add");
    std::string h2 = rmsnorm(x, b.random(w + ".ffn_norm.weight", {c.dim}, 1.f, 0.1f), p + "/ffn_norm");
    float down_std = 1.f / std::sqrt(static_cast<float>(c.hidden)) / std::sqrt(2.f * static_cast<float>(c.layers));
    std::string y = c.experts > 0 ? experts(h2, p + "/mlp", w, fan_in, down_std) : [&] {
      std::string a = b.node("MatMul", {h2, b.random(w + ".w1", {c.dim, c.hidden}, 0.f, fan_in)}, p + "/w1/MatMul");
      std::string silu = b.node("Mul", {a, b.node("Sigmoid", {a}, p + "/Sigmoid")}, p + "/Mul_silu");
      std::string g = b.node("MatMul", {h2, b.random(w + ".w3", {c.dim, c.hidden}, 0.f, fan_in)}, p + "/w3/MatMul");
      std::string m = b.node("Mul", {silu, g}, p + "/Mul_gate");
      return b.node("MatMul", {m, b.random(w + ".w2", {c.hidden, c.dim}, 0.f, down_std)}, p + "/w2/MatMul");
    }();
    x = b.node("Add", {x, y}, p + "/Add_1");
  }
  x = rmsnorm(x, b.random("norm.weight", {c.dim}, 1.f, 0.1f), "/norm");
  std::string cls;
  if (c.tied_classifier) {
    cls = b.node("Transpose", {emb}, "/cls/Transpose");  // folded at load
    b.attr_ints("perm", {1, 0});
  } else {
    cls = b.random("lm_head.weight", {c.dim, c.vocab}, 0.f, fan_in);
  }
  b.node("MatMul", {x, cls}, "/lm_head/MatMul");
  b.rename_last_output("logits");
  b.output("logits", TensorProto::FLOAT, {"batch_size", "sequence_length", std::to_string(c.vocab)});
  for (int64_t l = 0; l < c.layers; ++l)
    for (const char* kv : {"key", "value"})
      b.output("present." + std::to_string(l) + "." + kv, TensorProto::FLOAT, {"batch_size", std::to_string(KVH), T, std::to_string(D)});

  auto& m = b.model();
  m.set_ir_version(8);
  m.set_producer_name("switchyard synth");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto meta = [&](const std::string& k, const std::string& v) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  meta("max_position_embeddings", std::to_string(c.max_context));
  meta("synth_preset", c.name);
  meta("synth_seed", std::to_string(seed));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SY_CHECK(out, path << ": cannot write");
  SY_CHECK(m.SerializeToOstream(&out), path << ": writing the model failed");
}

}  // namespace sy
