#include "graph/gguf_model.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_tensors.h"
#include "graph/onnx_builder.h"
#include "graph/onnx_import_proto.h"

namespace sy {

namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

// ---------------------------------------------------------- architectures
// What differs between the families beyond what the tensors present show
// (biases, q/k norms, post-norms, a separate output matrix are read from the
// tensor list).
struct ArchRules {
  const char* name;
  bool rows_permuted;  // llama.cpp permuted q/k rows for its adjacent-pair rotary
  bool gemma;          // embeddings times sqrt(hidden), GELU (tanh) gate
  int swa_pattern;     // layer i uses the sliding window unless (i + 1) % n == 0; 0: every layer (when a window is set)
  // Mixture of experts (when the file has expert_count): whether the top-k
  // softmax weights are renormalised to sum to one, unless the file says
  // (expert_weights_norm). llama.cpp's choice per family: Llama with experts
  // (Mixtral) and Qwen3-MoE do, Qwen2-MoE does not.
  bool moe_norm_topk;
};
constexpr ArchRules kArchs[] = {
    {"llama", true, false, 0, true},    {"mistral", true, false, 0, true}, {"qwen2", false, false, 0, false},
    {"qwen3", false, false, 0, false},  {"phi3", false, false, 0, false},  {"gemma2", false, true, 2, false},
    {"gemma3", false, true, 6, false},  {"qwen2moe", false, false, 0, false}, {"qwen3moe", false, false, 0, true},
};

const ArchRules& arch_rules(const std::string& arch, const std::string& label) {
  for (const ArchRules& a : kArchs)
    if (arch == a.name) return a;
  std::ostringstream os;
  os << label << ": general.architecture '" << arch << "' is not supported (supported:";
  for (const ArchRules& a : kArchs) os << " " << a.name;
  os << ")";
  throw Error(os.str(), ErrorKind::Unsupported);
}

struct Hparams {
  int64_t layers = 0, dim = 0, ff = 0, heads = 0, kv_heads = 0, head_dim = 0, rot_dim = 0, vocab = 0, context = 0;
  float eps = 1e-5f, rope_base = 10000.f, rope_base_local = 10000.f, rope_scale = 1.f;
  float attn_scale = 0.f, attn_softcap = 0.f, final_softcap = 0.f;
  int64_t window = 0;
  // Mixture of experts: experts per layer (0: dense), chosen per token, the
  // experts' and the shared expert's hidden sizes, renormalised top-k weights.
  int64_t experts = 0, experts_used = 0, expert_ff = 0, shared_ff = 0;
  bool norm_topk = false;
};

Hparams read_hparams(const gguf::File& f, const std::string& arch, const ArchRules& rules) {
  auto key = [&](const char* k) { return arch + "." + k; };
  auto single = [&](const char* k, std::optional<int64_t> fallback) -> int64_t {
    // Per-layer keys may be arrays; the graph here needs one value.
    auto v = f.get_ints(key(k));
    if (!v) {
      SY_CHECK(fallback, f.label() << ": metadata '" << key(k) << "' is missing");
      return *fallback;
    }
    SY_CHECK(!v->empty(), f.label() << ": metadata '" << key(k) << "' is an empty array");
    for (int64_t x : *v)
      SY_CHECK_KIND(x == v->front(), ErrorKind::Unsupported,
                    f.label() << ": metadata '" << key(k) << "' differs between layers, which this importer does not support");
    return v->front();
  };
  Hparams h;
  h.layers = f.require_int(key("block_count"));
  h.dim = f.require_int(key("embedding_length"));
  // Mixtral is written as llama with experts; Qwen2/3-MoE as their own
  // families. Softmax routing only: sigmoid gating (DeepSeek, GLM) is named.
  h.experts = f.get_int(key("expert_count")).value_or(0);
  if (h.experts > 0) {
    h.experts_used = f.require_int(key("expert_used_count"));
    SY_CHECK(h.experts <= 4096 && h.experts_used > 0 && h.experts_used <= h.experts,
             f.label() << ": expert_used_count " << h.experts_used << " must be between 1 and expert_count " << h.experts);
    if (auto g = f.get_int(key("expert_gating_func")); g && *g != 1)
      SY_THROW_KIND(ErrorKind::Unsupported, f.label() << ": '" << key("expert_gating_func") << "' = " << *g
                                                      << ": only softmax routing (1) is supported");
    h.norm_topk = rules.moe_norm_topk;
    if (auto norm = f.get_bool(key("expert_weights_norm"))) h.norm_topk = *norm;
    if (auto scale = f.get_float(key("expert_weights_scale")); scale && *scale != 0.0 && *scale != 1.0)
      SY_THROW_KIND(ErrorKind::Unsupported, f.label() << ": '" << key("expert_weights_scale") << "' = " << *scale << " is not supported");
  }
  h.ff = single("feed_forward_length", h.experts > 0 ? std::optional<int64_t>(1) : std::nullopt);
  if (h.experts > 0) {
    h.expert_ff = single("expert_feed_forward_length", h.ff);
    h.shared_ff = single("expert_shared_feed_forward_length", h.expert_ff);
    SY_CHECK(h.expert_ff > 0 && h.expert_ff <= (int64_t{1} << 20) && h.shared_ff > 0 && h.shared_ff <= (int64_t{1} << 20),
             f.label() << ": expert_feed_forward_length " << h.expert_ff << " or expert_shared_feed_forward_length " << h.shared_ff
                       << " is out of range");
  }
  h.heads = single("attention.head_count", std::nullopt);
  h.kv_heads = single("attention.head_count_kv", h.heads);
  SY_CHECK(h.layers > 0 && h.layers <= 4096 && h.dim > 0 && h.heads > 0 && h.kv_heads > 0 && h.heads % h.kv_heads == 0,
           f.label() << ": block_count, embedding_length, head_count and head_count_kv must be positive, head_count a multiple of "
                        "head_count_kv (got "
                     << h.layers << ", " << h.dim << ", " << h.heads << ", " << h.kv_heads << ")");
  // Bounds that keep every product below int64 (a file may claim anything).
  constexpr int64_t kMaxWidth = int64_t{1} << 20, kMaxHeads = 4096;
  SY_CHECK(h.dim <= kMaxWidth && h.ff > 0 && h.ff <= kMaxWidth && h.heads <= kMaxHeads,
           f.label() << ": embedding_length " << h.dim << ", feed_forward_length " << h.ff << " or head_count " << h.heads
                     << " is out of range");
  h.head_dim = single("attention.key_length", h.dim % h.heads == 0 ? std::optional<int64_t>(h.dim / h.heads) : std::nullopt);
  SY_CHECK(h.head_dim > 0 && h.head_dim <= 65536, f.label() << ": attention.key_length " << h.head_dim << " is out of range");
  SY_CHECK(single("attention.value_length", h.head_dim) == h.head_dim,
           f.label() << ": attention.value_length differs from attention.key_length, which this importer does not support");
  h.rot_dim = single("rope.dimension_count", h.head_dim);
  SY_CHECK_KIND(h.rot_dim == h.head_dim, ErrorKind::Unsupported,
                f.label() << ": '" << key("rope.dimension_count") << "' = " << h.rot_dim << " rotates part of a head of " << h.head_dim
                          << " (partial rotary is not supported)");
  SY_CHECK(h.head_dim > 0 && h.head_dim % 2 == 0, f.label() << ": the head size " << h.head_dim << " must be even");
  h.context = f.get_int(key("context_length")).value_or(4096);
  h.eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  h.rope_base = static_cast<float>(f.get_float(key("rope.freq_base")).value_or(10000.0));
  if (auto type = f.get_string(key("rope.scaling.type")); type && *type != "none") {
    SY_CHECK_KIND(*type == "linear", ErrorKind::Unsupported,
                  f.label() << ": '" << key("rope.scaling.type") << "' = '" << *type << "' is not supported (none, linear)");
    h.rope_scale = static_cast<float>(f.get_float(key("rope.scaling.factor")).value_or(1.0));
    SY_CHECK(h.rope_scale > 0, f.label() << ": '" << key("rope.scaling.factor") << "' must be positive");
  }
  h.window = f.get_int(key("attention.sliding_window")).value_or(0);
  h.attn_softcap = static_cast<float>(f.get_float(key("attn_logit_softcapping")).value_or(0.0));
  h.final_softcap = static_cast<float>(f.get_float(key("final_logit_softcapping")).value_or(0.0));
  // llama.cpp's rule for the query scale (Gemma's query_pre_attn_scalar is
  // not in the file): 1/sqrt(head size), except Gemma 2/3 27B's
  // 1/sqrt(hidden / heads); an explicit attention.scale wins.
  h.attn_scale = 1.f / std::sqrt(static_cast<float>(h.head_dim));
  if (rules.gemma && h.layers == (arch == "gemma2" ? 46 : 62)) h.attn_scale = 1.f / std::sqrt(static_cast<float>(h.dim / h.heads));
  if (auto s = f.get_float(key("attention.scale")); s && *s > 0) h.attn_scale = static_cast<float>(*s);
  if (arch == "gemma3") h.rope_base_local = 10000.f;  // llama.cpp's (and transformers') local-layer base
  return h;
}

// --------------------------------------------------------------- weights
// A matrix of N output rows by K inputs, quantized (MatMulNBits form) or float.
struct Weight {
  std::string name;
  int64_t N = 0, K = 0;
  std::optional<gguf::BlockQuant> q;
  std::vector<float> rows;  // [N][K] when float
};

class WeightReader {
 public:
  WeightReader(const gguf::File& f, const GgufModelOptions& o, GgufModelSummary& s) : f_(f), options_(o), summary_(s) {}

  const gguf::TensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }

  Weight matrix(const std::string& name, bool allow_quantized = true) {
    const gguf::TensorInfo& t = f_.tensor(name);
    SY_CHECK(t.dims.size() == 2 || (t.dims.size() > 2 && t.rows() == t.dims[1]),
             f_.label() << ": tensor '" << name << "' should be a matrix, has " << t.dims.size() << " dims");
    return read(t, t.dims[0], t.dims[1], allow_quantized);
  }
  std::vector<float> vector(const std::string& name, int64_t expect) {
    const gguf::TensorInfo& t = f_.tensor(name);
    SY_CHECK(t.numel() == expect, f_.label() << ": tensor '" << name << "' has " << t.numel() << " elements, expected " << expect);
    return gguf::dequantize(t, f_.read_raw(t));
  }
  // A stack of E matrices of N rows by K (ggml dims [K, N, E]) as one
  // matrix of E * N rows: the experts' rows one after another, in their
  // blocks where the type maps onto MatMulNBits' (as matrix() keeps them),
  // else float32 [E][N][K].
  Weight stack(const std::string& name, int64_t E, int64_t N, int64_t K) {
    const gguf::TensorInfo& t = f_.tensor(name);
    SY_CHECK(t.dims.size() == 3 && t.dims[0] == K && t.dims[1] == N && t.dims[2] == E,
             f_.label() << ": tensor '" << name << "' should be " << E << " experts of [" << N << " x " << K << "] (dims [" << K << ", " << N
                        << ", " << E << "])");
    return read(t, K, E * N, true);
  }
  void expect_shape(const Weight& w, int64_t N, int64_t K) const {
    SY_CHECK(w.N == N && w.K == K, f_.label() << ": tensor '" << w.name << "' is [" << w.N << " x " << w.K << "] (rows x row length), the "
                                              << "metadata says [" << N << " x " << K << "]");
  }

 private:
  // Tensor t as N rows of K (its bytes in row order): in its blocks where
  // allowed and the type maps onto MatMulNBits', else float32.
  Weight read(const gguf::TensorInfo& t, int64_t K, int64_t N, bool allow_quantized) {
    Weight w;
    w.name = t.name;
    w.K = K;
    w.N = N;
    const std::vector<uint8_t> raw = f_.read_raw(t);
    if (allow_quantized && !options_.dequantize) {
      gguf::TensorInfo rows = t;
      rows.dims = {K, N};
      w.q = gguf::to_block_quant(rows, raw);
      if (w.q) {
        ++summary_.kept_quantized;
        return w;
      }
    }
    w.rows = gguf::dequantize(t, raw);
    ++summary_.dequantized;
    return w;
  }

  const gguf::File& f_;
  const GgufModelOptions& options_;
  GgufModelSummary& summary_;
};

// Rows [begin, begin + count) of w.
Weight slice_rows(const Weight& w, int64_t begin, int64_t count, const std::string& name) {
  Weight out;
  out.name = name;
  out.N = count;
  out.K = w.K;
  if (w.q) {
    const gguf::BlockQuant& q = *w.q;
    gguf::BlockQuant s = q;
    const int64_t blocks = q.K / q.block_size, row_codes = blocks * q.block_size * q.bits / 8;
    s.N = count;
    s.codes.assign(q.codes.begin() + begin * row_codes, q.codes.begin() + (begin + count) * row_codes);
    s.scales.assign(q.scales.begin() + begin * blocks, q.scales.begin() + (begin + count) * blocks);
    if (!q.float_zero_points.empty())
      s.float_zero_points.assign(q.float_zero_points.begin() + begin * blocks, q.float_zero_points.begin() + (begin + count) * blocks);
    out.q = std::move(s);
  } else {
    out.rows.assign(w.rows.begin() + begin * w.K, w.rows.begin() + (begin + count) * w.K);
  }
  return out;
}

// Puts llama.cpp's q/k rows back in Hugging Face's order: within each head,
// GGUF row 2i + j holds what HF keeps at row j * D/2 + i.
void unpermute_rows(Weight& w, int64_t heads) {
  const int64_t D = w.N / heads;
  std::vector<int64_t> from(static_cast<size_t>(w.N));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < D / 2; ++i) from[static_cast<size_t>(h * D + j * (D / 2) + i)] = h * D + 2 * i + j;
  auto permute = [&](auto& v, int64_t per_row) {
    auto src = v;
    for (int64_t r = 0; r < w.N; ++r)
      std::copy(src.begin() + from[static_cast<size_t>(r)] * per_row, src.begin() + (from[static_cast<size_t>(r)] + 1) * per_row,
                v.begin() + r * per_row);
  };
  if (w.q) {
    const int64_t blocks = w.K / w.q->block_size;
    permute(w.q->codes, blocks * w.q->block_size * w.q->bits / 8);
    permute(w.q->scales, blocks);
    if (!w.q->float_zero_points.empty()) permute(w.q->float_zero_points, blocks);
  } else {
    permute(w.rows, w.K);
  }
}

void unpermute_vector(std::vector<float>& v, int64_t heads) {
  Weight w;
  w.N = static_cast<int64_t>(v.size());
  w.K = 1;
  w.rows = v;
  unpermute_rows(w, heads);
  v = w.rows;
}

// ---------------------------------------------------------- the decoder
class DecoderBuilder {
 public:
  DecoderBuilder(const gguf::File& f, const GgufModelOptions& o, GgufModelSummary& s)
      : f_(f), w_(f, o, s), summary_(s), b_("decoder") {}

  onnx::ModelProto& build() {
    const std::string arch = f_.require_string("general.architecture");
    summary_.architecture = arch;
    for (const gguf::TensorInfo& t : f_.tensors()) ++summary_.stored_types[gguf::type_name(t.type)];
    const ArchRules& rules = arch_rules(arch, f_.label());
    h_ = read_hparams(f_, arch, rules);
    for (const char* longrope : {"rope_factors_long.weight", "rope_factors_short.weight", "rope_freqs.weight"})
      SY_CHECK_KIND(!w_.find(longrope), ErrorKind::Unsupported,
                    f_.label() << ": tensor '" << longrope << "' (per-frequency rotary factors) is not supported");

    const std::string T = "past_sequence_length + sequence_length";
    const int64_t D = h_.head_dim, H = h_.heads, KVH = h_.kv_heads;
    b_.input("input_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
    b_.input("attention_mask", TensorProto::INT64, {"batch_size", T});
    b_.input("position_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
    for (int64_t l = 0; l < h_.layers; ++l)
      for (const char* kv : {"key", "value"})
        b_.input("past_key_values." + std::to_string(l) + "." + kv, TensorProto::FLOAT,
                 {"batch_size", std::to_string(KVH), "past_sequence_length", std::to_string(D)});

    // Embeddings: a float table (a Gather reads a row per token).
    const gguf::TensorInfo& emb_info = f_.tensor("token_embd.weight");
    SY_CHECK(emb_info.dims.size() == 2 && emb_info.dims[0] == h_.dim,
             f_.label() << ": tensor 'token_embd.weight' should be [vocab x " << h_.dim << "]");
    h_.vocab = emb_info.dims[1];
    if (auto v = f_.get_int(arch + ".vocab_size"))
      SY_CHECK(*v == h_.vocab, f_.label() << ": " << arch << ".vocab_size is " << *v << " but token_embd.weight has " << h_.vocab << " rows");
    std::vector<float> table = gguf::dequantize(emb_info, f_.read_raw(emb_info));
    std::string x = b_.node("Gather", {b_.tensor("model.embed_tokens.weight", TensorProto::FLOAT, {h_.vocab, h_.dim}, table), "input_ids"},
                            "/model/embed_tokens/Gather");
    if (rules.gemma)
      x = b_.node("Mul", {x, b_.scalar("/model/embed_scale", static_cast<float>(std::sqrt(static_cast<double>(h_.dim))))},
                  "/model/embed_scale/Mul");

    const Masks masks = build_masks(rules);
    for (int64_t l = 0; l < h_.layers; ++l) x = layer(x, l, rules, masks);

    x = rmsnorm(x, "output_norm.weight", "/model/norm");
    const bool tied = !w_.find("output.weight");
    Weight head = w_.matrix(tied ? "token_embd.weight" : "output.weight");
    w_.expect_shape(head, h_.vocab, h_.dim);
    // The last node writes "logits" itself (an Identity would be removed at
    // load, leaving the output without its declared [.., vocab] shape).
    std::string logits = linear(x, head, "/lm_head", "lm_head.weight");
    if (h_.final_softcap > 0) logits = softcap(logits, h_.final_softcap, "/lm_head/softcap");
    b_.rename_last_output("logits");
    b_.output("logits", TensorProto::FLOAT, {"batch_size", "sequence_length", std::to_string(h_.vocab)});
    for (int64_t l = 0; l < h_.layers; ++l)
      for (const char* kv : {"key", "value"})
        b_.output("present." + std::to_string(l) + "." + kv, TensorProto::FLOAT,
                  {"batch_size", std::to_string(KVH), T, std::to_string(D)});
    (void)H;

    onnx::ModelProto& m = b_.model();
    m.set_ir_version(8);
    m.set_producer_name("switchyard gguf import");
    auto opset = [&](const std::string& domain, int64_t v) {
      auto* op = m.add_opset_import();
      op->set_domain(domain);
      op->set_version(v);
    };
    opset("", 17);
    if (summary_.kept_quantized > 0) opset("com.microsoft", 1);
    if (expert_ops_) opset("switchyard", 1);
    auto meta = [&](const std::string& k, const std::string& v) {
      auto* p = m.add_metadata_props();
      p->set_key(k);
      p->set_value(v);
    };
    meta("max_position_embeddings", std::to_string(h_.context));
    meta("gguf_architecture", arch);
    summary_.config = hf_config(arch, rules, tied);
    return m;
  }

  const Hparams& hparams() const { return h_; }

 private:
  nlohmann::ordered_json hf_config(const std::string& arch, const ArchRules& rules, bool tied) const {
    static const std::map<std::string, std::pair<const char*, const char*>> names = {
        {"llama", {"llama", "LlamaForCausalLM"}},    {"mistral", {"mistral", "MistralForCausalLM"}},
        {"qwen2", {"qwen2", "Qwen2ForCausalLM"}},    {"qwen3", {"qwen3", "Qwen3ForCausalLM"}},
        {"phi3", {"phi3", "Phi3ForCausalLM"}},       {"gemma2", {"gemma2", "Gemma2ForCausalLM"}},
        {"gemma3", {"gemma3_text", "Gemma3ForCausalLM"}},  {"qwen2moe", {"qwen2_moe", "Qwen2MoeForCausalLM"}},
        {"qwen3moe", {"qwen3_moe", "Qwen3MoeForCausalLM"}}};
    const auto& [type, cls] = names.at(arch);
    nlohmann::ordered_json c;
    c["architectures"] = {cls};
    c["model_type"] = type;
    c["hidden_size"] = h_.dim;
    c["intermediate_size"] = h_.ff;
    c["num_hidden_layers"] = h_.layers;
    c["num_attention_heads"] = h_.heads;
    c["num_key_value_heads"] = h_.kv_heads;
    c["head_dim"] = h_.head_dim;
    c["vocab_size"] = h_.vocab;
    c["max_position_embeddings"] = h_.context;
    c["rms_norm_eps"] = h_.eps;
    c["rope_theta"] = h_.rope_base;
    if (h_.rope_scale != 1.f) c["rope_scaling"] = {{"type", "linear"}, {"factor", h_.rope_scale}};
    c["tie_word_embeddings"] = tied;
    if (h_.window > 0) c["sliding_window"] = h_.window;
    if (h_.attn_softcap > 0) c["attn_logit_softcapping"] = h_.attn_softcap;
    if (h_.final_softcap > 0) c["final_logit_softcapping"] = h_.final_softcap;
    if (rules.gemma) c["query_pre_attn_scalar"] = 1.0 / (static_cast<double>(h_.attn_scale) * h_.attn_scale);
    c["torch_dtype"] = "float32";
    return c;
  }

  struct Rope {
    std::string cos, sin;
  };
  struct Masks {
    std::string global, local;  // additive masks [B, 1, S, T]; local: with the sliding window
    Rope rope_global, rope_local;
  };

  Rope rope_tables(float base, float scale, const std::string& p) {
    // Hugging Face's: inv_freq = 1 / base^(2i/d) in float32, divided by a
    // linear scaling factor; angles = position * inv_freq; cos and sin of
    // the angles repeated for both halves.
    const int64_t R = h_.rot_dim;
    std::vector<float> inv(static_cast<size_t>(R / 2));
    for (int64_t i = 0; i < R / 2; ++i)
      inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(R)) / scale;
    std::string pos = b_.node("Unsqueeze", {"position_ids", b_.ints(p + "/axes2", {2})}, p + "/Unsqueeze");
    pos = b_.node("Cast", {pos}, p + "/Cast");
    b_.attr_int("to", TensorProto::FLOAT);
    std::string ang = b_.node("Mul", {pos, b_.tensor(p + "/inv_freq", TensorProto::FLOAT, {R / 2}, inv)}, p + "/Mul");
    std::string emb = b_.node("Concat", {ang, ang}, p + "/Concat");
    b_.attr_int("axis", -1);
    Rope r;
    r.cos = b_.node("Unsqueeze", {b_.node("Cos", {emb}, p + "/Cos"), b_.ints(p + "/axes1", {1})}, p + "/Unsqueeze_cos");
    r.sin = b_.node("Unsqueeze", {b_.node("Sin", {emb}, p + "/Sin"), b_.ints(p + "/axes1b", {1})}, p + "/Unsqueeze_sin");
    return r;
  }

  Masks build_masks(const ArchRules& rules) {
    Masks m;
    // Key j is visible to query i when j <= past + i, attention_mask[j] is 1
    // and, with a window W, past + i - j < W.
    const std::string p = "/model/mask";
    std::string one = b_.ints(p + "/one", {1}), zero = b_.ints(p + "/zero", {0});
    std::string t_len = b_.node("Gather", {b_.node("Shape", {"attention_mask"}, p + "/ShapeM"), one}, p + "/GatherT");
    std::string s_len = b_.node("Gather", {b_.node("Shape", {"input_ids"}, p + "/ShapeI"), one}, p + "/GatherS");
    std::string t_scalar = b_.node("Squeeze", {t_len, zero}, p + "/SqueezeT");
    std::string s_scalar = b_.node("Squeeze", {s_len, zero}, p + "/SqueezeS");
    std::string zero_s = b_.ints(p + "/zero_s", {0}, true), one_s = b_.ints(p + "/one_s", {1}, true);
    std::string kpos = b_.node("Unsqueeze", {b_.node("Range", {zero_s, t_scalar, one_s}, p + "/RangeK"), zero}, p + "/UnsqK");
    std::string qpos = b_.node("Add", {b_.node("Range", {zero_s, s_scalar, one_s}, p + "/RangeQ"), b_.node("Sub", {t_scalar, s_scalar}, p + "/Past")},
                               p + "/AddQ");
    qpos = b_.node("Unsqueeze", {qpos, one}, p + "/UnsqQ");
    std::string causal = b_.node("LessOrEqual", {kpos, qpos}, p + "/Causal");
    std::string real = b_.node("Equal", {"attention_mask", b_.ints(p + "/one_v", {1})}, p + "/Real");
    real = b_.node("Unsqueeze", {real, b_.ints(p + "/axes12", {1, 2})}, p + "/UnsqReal");
    std::string visible = b_.node("And", {causal, real}, p + "/And");
    std::string zero_f = b_.scalar(p + "/zero_f", 0.f), min_f = b_.scalar(p + "/min_f", -3.4028234663852886e38f);
    m.global = b_.node("Where", {visible, zero_f, min_f}, p + "/Where");
    m.rope_global = rope_tables(h_.rope_base, h_.rope_scale, "/model/rotary_emb");
    if (h_.window > 0) {
      std::string near = b_.node("Less", {b_.node("Sub", {qpos, kpos}, p + "/Distance"), b_.ints(p + "/window", {h_.window})}, p + "/Near");
      m.local = b_.node("Where", {b_.node("And", {visible, near}, p + "/AndWindow"), zero_f, min_f}, p + "/WhereWindow");
      // Gemma 3's local layers rotate with their own base and no scaling.
      m.rope_local = h_.rope_base_local != h_.rope_base || (rules.swa_pattern > 0 && h_.rope_scale != 1.f)
                         ? rope_tables(h_.rope_base_local, 1.f, "/model/rotary_emb_local")
                         : m.rope_global;
    }
    return m;
  }

  bool sliding(int64_t l, const ArchRules& rules) const {
    if (h_.window <= 0) return false;
    return rules.swa_pattern == 0 || (l + 1) % rules.swa_pattern != 0;
  }

  std::string rmsnorm(const std::string& in, const std::string& weight, const std::string& p, int64_t width = 0) {
    const int64_t n = width > 0 ? width : h_.dim;
    std::vector<float> w = w_.vector(weight, n);
    std::string sq = b_.node("Pow", {in, b_.scalar(p + "/two", 2.f)}, p + "/Pow");
    std::string mean = b_.node("ReduceMean", {sq}, p + "/ReduceMean");
    b_.attr_ints("axes", {-1});
    b_.attr_int("keepdims", 1);
    std::string denom = b_.node("Sqrt", {b_.node("Add", {mean, b_.scalar(p + "/eps", h_.eps)}, p + "/Add")}, p + "/Sqrt");
    std::string inv = b_.node("Div", {b_.scalar(p + "/one", 1.f), denom}, p + "/Div");
    return b_.node("Mul", {b_.node("Mul", {in, inv}, p + "/Mul"), b_.tensor(weight, TensorProto::FLOAT, {n}, w)}, p + "/Mul_1");
  }

  // x [.., K] times the weight's transpose: MatMul over float32 W^T, or
  // MatMulNBits over the stored blocks.
  std::string linear(const std::string& x, const Weight& w, const std::string& p, const std::string& init_name) {
    if (w.q) {
      const gguf::BlockQuant& q = *w.q;
      const int64_t blocks = q.K / q.block_size;
      std::vector<std::string> in{x, b_.tensor(init_name + ".codes", TensorProto::UINT8, {q.N, blocks, q.block_size * q.bits / 8}, q.codes),
                                  b_.tensor(init_name + ".scales", TensorProto::FLOAT, {q.N * blocks}, q.scales)};
      if (!q.float_zero_points.empty())
        in.push_back(b_.tensor(init_name + ".zero_points", TensorProto::FLOAT, {q.N * blocks}, q.float_zero_points));
      std::string y = b_.node("MatMulNBits", in, p + "/MatMulNBits", "com.microsoft");
      b_.attr_int("K", q.K);
      b_.attr_int("N", q.N);
      b_.attr_int("bits", q.bits);
      b_.attr_int("block_size", q.block_size);
      return y;
    }
    std::vector<float> t(static_cast<size_t>(w.K * w.N));
    for (int64_t n = 0; n < w.N; ++n)
      for (int64_t k = 0; k < w.K; ++k) t[static_cast<size_t>(k * w.N + n)] = w.rows[static_cast<size_t>(n * w.K + k)];
    return b_.node("MatMul", {x, b_.tensor(init_name, TensorProto::FLOAT, {w.K, w.N}, t)}, p + "/MatMul");
  }

  std::string linear_bias(const std::string& x, const Weight& w, const std::string& p, const std::string& init_name,
                          const std::string& bias_tensor, int64_t permute_heads = 0) {
    std::string y = linear(x, w, p, init_name + ".weight");
    if (!w_.find(bias_tensor)) return y;
    std::vector<float> bias = w_.vector(bias_tensor, w.N);
    if (permute_heads > 0) unpermute_vector(bias, permute_heads);
    return b_.node("Add", {y, b_.tensor(init_name + ".bias", TensorProto::FLOAT, {w.N}, bias)}, p + "/Add");
  }

  std::string softcap(const std::string& x, float cap, const std::string& p) {
    std::string t = b_.node("Tanh", {b_.node("Div", {x, b_.scalar(p + "/cap", cap)}, p + "/Div")}, p + "/Tanh");
    return b_.node("Mul", {t, b_.scalar(p + "/cap_out", cap)}, p + "/Mul");
  }

  // [B, S, n*D] -> [B, n, S, D], with the per-head RMSNorm of Qwen3/Gemma 3
  // on [B, S, n, D] first when the file has one.
  std::string heads(const std::string& in, int64_t n, const std::string& p, const std::string& norm_tensor) {
    std::string r = b_.node("Reshape", {in, b_.ints(p + "/shape", {0, 0, n, h_.head_dim})}, p + "/Reshape");
    if (!norm_tensor.empty() && w_.find(norm_tensor)) r = rmsnorm(r, norm_tensor, p + "/norm", h_.head_dim);
    std::string t = b_.node("Transpose", {r}, p + "/Transpose");
    b_.attr_ints("perm", {0, 2, 1, 3});
    return t;
  }

  // Hugging Face's rotate_half form: x * cos + cat(-x2, x1) * sin.
  std::string rope(const std::string& in, const Rope& r, const std::string& p) {
    const int64_t D = h_.head_dim;
    std::string ax = b_.ints(p + "/ax", {3});
    std::string x1 = b_.node("Slice", {in, b_.ints(p + "/s0", {0}), b_.ints(p + "/e0", {D / 2}), ax}, p + "/Slice");
    std::string x2 = b_.node("Slice", {in, b_.ints(p + "/s1", {D / 2}), b_.ints(p + "/e1", {D}), ax}, p + "/Slice_1");
    std::string rot = b_.node("Concat", {b_.node("Neg", {x2}, p + "/Neg"), x1}, p + "/Concat");
    b_.attr_int("axis", -1);
    return b_.node("Add", {b_.node("Mul", {in, r.cos}, p + "/Mul"), b_.node("Mul", {rot, r.sin}, p + "/Mul_1")}, p + "/Add");
  }

  std::string repeat_kv(const std::string& kv, const std::string& p) {
    const int64_t rep = h_.heads / h_.kv_heads;
    if (rep == 1) return kv;
    std::string u = b_.node("Unsqueeze", {kv, b_.ints(p + "/ax", {2})}, p + "/Unsqueeze");
    std::string e = b_.node("Expand", {u, b_.ints(p + "/shape", {1, 1, rep, 1, 1})}, p + "/Expand");
    return b_.node("Reshape", {e, b_.ints(p + "/shape2", {0, h_.heads, -1, h_.head_dim})}, p + "/Reshape");
  }

  std::string layer(const std::string& x_in, int64_t l, const ArchRules& rules, const Masks& masks) {
    const std::string blk = "blk." + std::to_string(l) + ".", p = "/model/layers." + std::to_string(l), w = "model.layers." + std::to_string(l);
    const int64_t D = h_.head_dim, H = h_.heads, KVH = h_.kv_heads;
    std::string x = x_in;
    std::string hn = rmsnorm(x, blk + "attn_norm.weight", p + "/input_layernorm", h_.dim);

    Weight wq, wk, wv;
    if (w_.find(blk + "attn_qkv.weight")) {  // Phi-3: one matrix, q then k then v rows
      Weight qkv = w_.matrix(blk + "attn_qkv.weight");
      w_.expect_shape(qkv, (H + 2 * KVH) * D, h_.dim);
      wq = slice_rows(qkv, 0, H * D, blk + "attn_q");
      wk = slice_rows(qkv, H * D, KVH * D, blk + "attn_k");
      wv = slice_rows(qkv, (H + KVH) * D, KVH * D, blk + "attn_v");
    } else {
      wq = w_.matrix(blk + "attn_q.weight");
      wk = w_.matrix(blk + "attn_k.weight");
      wv = w_.matrix(blk + "attn_v.weight");
      w_.expect_shape(wq, H * D, h_.dim);
      w_.expect_shape(wk, KVH * D, h_.dim);
      w_.expect_shape(wv, KVH * D, h_.dim);
    }
    if (rules.rows_permuted) {
      unpermute_rows(wq, H);
      unpermute_rows(wk, KVH);
    }
    const int64_t perm_q = rules.rows_permuted ? H : 0, perm_k = rules.rows_permuted ? KVH : 0;
    std::string q = linear_bias(hn, wq, p + "/self_attn/q_proj", w + ".self_attn.q_proj", blk + "attn_q.bias", perm_q);
    std::string k = linear_bias(hn, wk, p + "/self_attn/k_proj", w + ".self_attn.k_proj", blk + "attn_k.bias", perm_k);
    std::string v = linear_bias(hn, wv, p + "/self_attn/v_proj", w + ".self_attn.v_proj", blk + "attn_v.bias");

    const bool local = sliding(l, rules);
    const Rope& r = local ? masks.rope_local : masks.rope_global;
    std::string qr = rope(heads(q, H, p + "/self_attn/q", blk + "attn_q_norm.weight"), r, p + "/self_attn/q_rope");
    std::string kr = rope(heads(k, KVH, p + "/self_attn/k", blk + "attn_k_norm.weight"), r, p + "/self_attn/k_rope");
    std::string vh = heads(v, KVH, p + "/self_attn/v", "");
    const std::string pk = "present." + std::to_string(l) + ".key", pv = "present." + std::to_string(l) + ".value";
    b_.node("Concat", {"past_key_values." + std::to_string(l) + ".key", kr}, p + "/self_attn/Concat_k");
    b_.attr_int("axis", 2);
    b_.rename_last_output(pk);
    b_.node("Concat", {"past_key_values." + std::to_string(l) + ".value", vh}, p + "/self_attn/Concat_v");
    b_.attr_int("axis", 2);
    b_.rename_last_output(pv);
    std::string kt = b_.node("Transpose", {repeat_kv(pk, p + "/self_attn/rep_k")}, p + "/self_attn/Transpose_k");
    b_.attr_ints("perm", {0, 1, 3, 2});
    std::string scores = b_.node("MatMul", {qr, kt}, p + "/self_attn/MatMul");
    scores = b_.node("Mul", {scores, b_.scalar(p + "/self_attn/scaling", h_.attn_scale)}, p + "/self_attn/Mul_scale");
    if (h_.attn_softcap > 0) scores = softcap(scores, h_.attn_softcap, p + "/self_attn/softcap");
    scores = b_.node("Add", {scores, local ? masks.local : masks.global}, p + "/self_attn/Add_mask");
    std::string probs = b_.node("Softmax", {scores}, p + "/self_attn/Softmax");
    b_.attr_int("axis", -1);
    std::string attn = b_.node("MatMul", {probs, repeat_kv(pv, p + "/self_attn/rep_v")}, p + "/self_attn/MatMul_1");
    attn = b_.node("Transpose", {attn}, p + "/self_attn/Transpose_o");
    b_.attr_ints("perm", {0, 2, 1, 3});
    attn = b_.node("Reshape", {attn, b_.ints(p + "/self_attn/o_shape", {0, 0, H * D})}, p + "/self_attn/Reshape_o");
    Weight wo = w_.matrix(blk + "attn_output.weight");
    w_.expect_shape(wo, h_.dim, H * D);
    attn = linear_bias(attn, wo, p + "/self_attn/o_proj", w + ".self_attn.o_proj", blk + "attn_output.bias");
    if (w_.find(blk + "post_attention_norm.weight")) attn = rmsnorm(attn, blk + "post_attention_norm.weight", p + "/post_attention_layernorm");
    x = b_.node("Add", {x, attn}, p + "/Add");

    std::string h2 = rmsnorm(x, blk + "ffn_norm.weight", p + "/post_attention_layernorm_ffn");
    // A layer is a mixture of experts where the file has its router or its
    // expert stacks (a family may keep some layers dense), else a dense
    // block; stacks without a router are refused by moe(), naming it.
    const bool experts_here = h_.experts > 0 && (w_.find(blk + "ffn_gate_inp.weight") || w_.find(blk + "ffn_up_exps.weight") ||
                                                 w_.find(blk + "ffn_gate_exps.weight") || w_.find(blk + "ffn_down_exps.weight"));
    if (experts_here) return b_.node("Add", {x, moe(h2, blk, p + "/mlp", w + ".mlp")}, p + "/Add_1");
    Weight gate, up;
    if (!w_.find(blk + "ffn_gate.weight")) {  // Phi-3: gate and up rows in one matrix
      Weight gu = w_.matrix(blk + "ffn_up.weight");
      w_.expect_shape(gu, 2 * h_.ff, h_.dim);
      gate = slice_rows(gu, 0, h_.ff, blk + "ffn_gate");
      up = slice_rows(gu, h_.ff, h_.ff, blk + "ffn_up");
    } else {
      gate = w_.matrix(blk + "ffn_gate.weight");
      up = w_.matrix(blk + "ffn_up.weight");
    }
    std::string y = gated_ffn(h2, gate, up, w_.matrix(blk + "ffn_down.weight"), h_.ff, rules.gemma, p + "/mlp", w + ".mlp");
    if (w_.find(blk + "post_ffw_norm.weight")) y = rmsnorm(y, blk + "post_ffw_norm.weight", p + "/post_feedforward_layernorm");
    return b_.node("Add", {x, y}, p + "/Add_1");
  }

  // down(act(gate(in)) * up(in)) with hidden size ff: SiLU, or Gemma's GELU
  // (tanh). A dense layer's feed-forward block and Qwen2-MoE's shared expert.
  std::string gated_ffn(const std::string& in, const Weight& gate, const Weight& up, const Weight& down, int64_t ff, bool gelu,
                        const std::string& p, const std::string& w) {
    w_.expect_shape(gate, ff, h_.dim);
    w_.expect_shape(up, ff, h_.dim);
    w_.expect_shape(down, h_.dim, ff);
    std::string a = linear(in, gate, p + "/gate_proj", w + ".gate_proj.weight");
    std::string act = gelu ? gelu_tanh(a, p + "/act") : b_.node("Mul", {a, b_.node("Sigmoid", {a}, p + "/Sigmoid")}, p + "/Mul_silu");
    std::string m = b_.node("Mul", {act, linear(in, up, p + "/up_proj", w + ".up_proj.weight")}, p + "/Mul");
    return linear(m, down, p + "/down_proj", w + ".down_proj.weight");
  }

  // A mixture-of-experts block as llama.cpp computes it: softmax over the
  // router's logits, the top k experts, their weights renormalised where the
  // family does; each (token, choice) runs its expert's gated SiLU block and
  // the k outputs are summed with those weights. Qwen2-MoE adds a shared
  // expert scaled by a sigmoid gate. The experts are written as exporters
  // write them (a Gather of the stacked matrices by expert index, then a
  // batched MatMul), the form the baseline runs as it stands and the
  // fuse-experts pass turns into one grouped product per selected expert.
  std::string moe(const std::string& in, const std::string& blk, const std::string& p, const std::string& w) {
    const int64_t E = h_.experts, k = h_.experts_used, F = h_.expert_ff, Dm = h_.dim;
    std::string shape_in = b_.node("Shape", {in}, p + "/Shape");
    std::string x = b_.node("Reshape", {in, b_.ints(p + "/rows", {-1, Dm})}, p + "/Reshape_x");  // [T, D]
    Weight router = w_.matrix(blk + "ffn_gate_inp.weight", false);
    w_.expect_shape(router, E, Dm);
    std::string probs = b_.node("Softmax", {linear(x, router, p + "/gate", w + ".gate.weight")}, p + "/Softmax");
    b_.attr_int("axis", -1);
    std::vector<std::string> top;  // the k largest probabilities [T, k] and their experts [T, k]
    b_.node("TopK", {probs, b_.ints(p + "/k", {k})}, p + "/TopK", "", 2, &top);
    b_.attr_int("axis", -1);
    b_.attr_int("largest", 1);
    b_.attr_int("sorted", 1);
    std::string weights = top[0], chosen = top[1];
    if (h_.norm_topk) {
      std::string sum = b_.node("ReduceSum", {weights, b_.ints(p + "/axis_k", {-1})}, p + "/ReduceSum");
      b_.attr_int("keepdims", 1);
      weights = b_.node("Div", {weights, sum}, p + "/Div");
    }
    // Each token's row once per choice, as a column: [T * k, D, 1].
    std::string xs = b_.node("Unsqueeze", {x, b_.ints(p + "/axis1", {1})}, p + "/Unsqueeze_x");
    xs = b_.node("Expand", {xs, b_.ints(p + "/expand", {1, k, 1})}, p + "/Expand_x");
    xs = b_.node("Reshape", {xs, b_.ints(p + "/columns", {-1, Dm, 1})}, p + "/Reshape_columns");
    std::string ids = b_.node("Reshape", {chosen, b_.ints(p + "/flat", {-1})}, p + "/Reshape_ids");  // [T * k]
    auto experts = [&](const std::string& name, int64_t N, int64_t K, const std::string& col, const std::string& q) {
      const std::string init = w + ".experts." + name;
      Weight st = w_.stack(blk + "ffn_" + name + "_exps.weight", E, N, K);
      if (st.q) {
        // Kept in the file's blocks: the quantize plugin's grouped product
        // over the stacked rows (what its pass makes of ExpertMatMul), so a
        // large MoE file never exists as float32.
        const gguf::BlockQuant& bq = *st.q;
        const int64_t blocks = K / bq.block_size;
        std::vector<std::string> inputs{col, ids,
                                    b_.tensor(init + ".codes", TensorProto::UINT8, {E * N, blocks, bq.block_size * bq.bits / 8}, bq.codes),
                                    b_.tensor(init + ".scales", TensorProto::FLOAT, {E * N * blocks}, bq.scales)};
        if (!bq.float_zero_points.empty())
          inputs.push_back(b_.tensor(init + ".zero_points", TensorProto::FLOAT, {E * N * blocks}, bq.float_zero_points));
        std::string y = b_.node("ExpertMatMulNBits", inputs, q + "/ExpertMatMulNBits", "switchyard");
        b_.attr_int("K", K);
        b_.attr_int("N", N);
        b_.attr_int("bits", bq.bits);
        b_.attr_int("block_size", bq.block_size);
        b_.attr_int("experts", E);
        b_.attr_int("columns", 1);
        expert_ops_ = true;
        return y;  // [T * k, N, 1]
      }
      std::string stack = b_.tensor(init, TensorProto::FLOAT, {E, N, K}, st.rows);
      std::string picked = b_.node("Gather", {stack, ids}, q + "/Gather");  // [T * k, N, K]
      b_.attr_int("axis", 0);
      return b_.node("MatMul", {picked, col}, q + "/MatMul");  // [T * k, N, 1]
    };
    std::string g = experts("gate", F, Dm, xs, p + "/experts/gate_proj");
    std::string act = b_.node("Mul", {g, b_.node("Sigmoid", {g}, p + "/experts/Sigmoid")}, p + "/experts/Mul_silu");
    std::string h = b_.node("Mul", {act, experts("up", F, Dm, xs, p + "/experts/up_proj")}, p + "/experts/Mul");
    std::string y = experts("down", Dm, F, h, p + "/experts/down_proj");  // [T * k, D, 1]
    y = b_.node("Mul", {y, b_.node("Reshape", {weights, b_.ints(p + "/weight_shape", {-1, 1, 1})}, p + "/Reshape_w")}, p + "/Mul_w");
    y = b_.node("ReduceSum", {b_.node("Reshape", {y, b_.ints(p + "/per_token", {-1, k, Dm})}, p + "/Reshape_y"), b_.ints(p + "/axis_sum", {1})},
                p + "/ReduceSum_k");
    b_.attr_int("keepdims", 0);  // [T, D]
    y = b_.node("Reshape", {y, shape_in}, p + "/Reshape_out");
    if (w_.find(blk + "ffn_gate_shexp.weight")) {
      std::string shared = gated_ffn(in, w_.matrix(blk + "ffn_gate_shexp.weight"), w_.matrix(blk + "ffn_up_shexp.weight"),
                                     w_.matrix(blk + "ffn_down_shexp.weight"), h_.shared_ff, false, p + "/shared_expert", w + ".shared_expert");
      if (w_.find(blk + "ffn_gate_inp_shexp.weight")) {
        std::vector<float> gw = w_.vector(blk + "ffn_gate_inp_shexp.weight", Dm);
        std::string gate = b_.node("MatMul", {in, b_.tensor(w + ".shared_expert_gate.weight", TensorProto::FLOAT, {Dm, 1}, gw)},
                                   p + "/shared_expert_gate/MatMul");
        shared = b_.node("Mul", {b_.node("Sigmoid", {gate}, p + "/shared_expert_gate/Sigmoid"), shared}, p + "/shared_expert/Mul_gate");
      }
      y = b_.node("Add", {y, shared}, p + "/Add_shared");
    }
    return y;
  }

  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  std::string gelu_tanh(const std::string& x, const std::string& p) {
    std::string cube = b_.node("Pow", {x, b_.scalar(p + "/three", 3.f)}, p + "/Pow");
    std::string inner = b_.node("Add", {x, b_.node("Mul", {cube, b_.scalar(p + "/c", 0.044715f)}, p + "/Mul")}, p + "/Add");
    std::string t = b_.node("Tanh", {b_.node("Mul", {inner, b_.scalar(p + "/k", 0.7978845608028654f)}, p + "/Mul_1")}, p + "/Tanh");
    std::string one_plus = b_.node("Add", {t, b_.scalar(p + "/one", 1.f)}, p + "/Add_1");
    return b_.node("Mul", {b_.node("Mul", {x, b_.scalar(p + "/half", 0.5f)}, p + "/Mul_2"), one_plus}, p + "/Mul_3");
  }

  const gguf::File& f_;
  WeightReader w_;
  GgufModelSummary& summary_;
  Hparams h_;
  OnnxBuilder b_;
  bool expert_ops_ = false;  // a quantized expert stack became switchyard::ExpertMatMulNBits
};

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && gguf::File::is_gguf(path);
}

Graph import_gguf_file(const std::string& path, const ImportOptions& import, const GgufModelOptions& options, GgufModelSummary* summary) {
  GgufModelSummary local;
  GgufModelSummary& s = summary ? *summary : local;
  SY_CHECK(import.max_file_bytes == 0 || std::filesystem::file_size(path) <= import.max_file_bytes,
           path << ": the model file is over the limit of " << import.max_file_bytes << " bytes");
  const fs::path p(path);
  return import_gguf(gguf::File::open(path), p.has_parent_path() ? p.parent_path().string() : ".", import, options, &s);
}

Graph import_gguf(const gguf::File& f, const std::string& model_dir, const ImportOptions& import, const GgufModelOptions& options,
                  GgufModelSummary* summary) {
  GgufModelSummary local;
  DecoderBuilder builder(f, options, summary ? *summary : local);
  onnx::ModelProto& model = builder.build();
  return import_onnx_model(model, model_dir, f.label(), import);
}

GgufModelSummary write_gguf_as_onnx(const std::string& gguf_path, const std::string& onnx_path, const GgufModelOptions& options) {
  GgufModelSummary s;
  const gguf::File f = gguf::File::open(gguf_path);
  DecoderBuilder builder(f, options, s);
  onnx::ModelProto& model = builder.build();
  // Weights go to <model>.data (ONNX external data), so the model file stays
  // small and models over protobuf's 2 GiB limit can be written.
  const std::string data_name = fs::path(onnx_path).filename().string() + ".data";
  std::ofstream data(fs::path(onnx_path).string() + ".data", std::ios::binary | std::ios::trunc);
  SY_CHECK(data, onnx_path << ".data: cannot write");
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    if (!t.has_raw_data() || t.raw_data().size() < 1024) continue;
    const auto offset = static_cast<int64_t>(data.tellp());
    data.write(t.raw_data().data(), static_cast<std::streamsize>(t.raw_data().size()));
    auto add = [&](const std::string& k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", data_name);
    add("offset", std::to_string(offset));
    add("length", std::to_string(t.raw_data().size()));
    t.clear_raw_data();
    t.set_data_location(TensorProto::EXTERNAL);
  }
  SY_CHECK(data.good(), onnx_path << ".data: writing failed");
  std::ofstream out(onnx_path, std::ios::binary | std::ios::trunc);
  SY_CHECK(out, onnx_path << ": cannot write");
  SY_CHECK(model.SerializeToOstream(&out), onnx_path << ": writing the model failed");
  return s;
}

}  // namespace sy
