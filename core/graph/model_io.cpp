#include "graph/model_io.h"
#include "switchyard/plugin.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>



namespace sy {

namespace fs = std::filesystem;

namespace {

// Lower-case tokens of a name split at every non-alphanumeric character and
// at letter/digit boundaries: "past_key_values.12.key" -> past key values 12 key.
std::vector<std::string> tokens_of(const std::string& name) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) {
      flush();
      continue;
    }
    if (!cur.empty() && (std::isdigit(static_cast<unsigned char>(c)) != 0) != (std::isdigit(static_cast<unsigned char>(cur.back())) != 0)) flush();
    cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  flush();
  return out;
}

// A KV tensor name: which layer, key or value, past or present. Accepts the
// spellings exporters use (past_key_values.N.key, past.N.value, past_key_N,
// present_value.N, present.N.k, cache.N.key ...).
struct KvName {
  int layer = -1;
  bool is_key = false;
  bool ok = false;
};
KvName parse_kv(const std::string& name, bool past) {
  KvName r;
  auto t = tokens_of(name);
  bool role = false, key = false, value = false;
  for (const auto& s : t) {
    if (past ? (s == "past" || s == "cache" || s == "pkv") : (s == "present")) role = true;
    if (s == "key" || s == "keys" || s == "k") key = true;
    if (s == "value" || s == "values" || s == "v") value = true;
    if (r.layer < 0 && std::isdigit(static_cast<unsigned char>(s[0]))) r.layer = std::stoi(s);
  }
  // "past_key_values.N.key": 'values' names the collection, the last word the kind.
  if (key && value) {
    for (auto it = t.rbegin(); it != t.rend(); ++it)
      if (*it == "key" || *it == "k" || *it == "value" || *it == "v") {
        key = *it == "key" || *it == "k";
        value = !key;
        break;
      }
  }
  r.ok = role && r.layer >= 0 && key != value;
  r.is_key = key;
  return r;
}

// Expands an onnxruntime-genai name pattern ("past_key_values.%d.key").
std::string pattern_name(const std::string& pattern, int layer) {
  std::string out = pattern;
  size_t at = out.find("%d");
  if (at != std::string::npos) out.replace(at, 2, std::to_string(layer));
  return out;
}

std::string list_values(const Graph& g, bool inputs) {
  std::ostringstream os;
  if (inputs)
    for (ValueId v : g.inputs) os << " '" << g.values[static_cast<size_t>(v)].name << "'";
  else
    for (const auto& o : g.outputs) os << " '" << o.name << "'";
  return os.str();
}

}  // namespace

ModelIO discover_model_io(const Graph& g, const std::string& path, const GenaiConfig* genai,
                          const std::vector<std::string>& extra_inputs, bool fused) {
  ModelIO io;
  auto input_slot = [&](const std::string& name) {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.values[static_cast<size_t>(g.inputs[i])].name == name) return static_cast<int>(i);
    return -1;
  };
  auto output_slot = [&](const std::string& name) {
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.outputs[i].name == name) return static_cast<int>(i);
    return -1;
  };
  auto named = [&](const std::map<std::string, std::string>& m, const char* role, const char* fallback) {
    auto it = m.find(role);
    return it != m.end() ? it->second : std::string(fallback);
  };
  static const std::map<std::string, std::string> none;
  const auto& gin = genai ? genai->inputs : none;
  const auto& gout = genai ? genai->outputs : none;
  io.input_ids = input_slot(named(gin, "input_ids", "input_ids"));
  io.attention_mask = input_slot(named(gin, "attention_mask", "attention_mask"));
  io.position_ids = input_slot(named(gin, "position_ids", "position_ids"));
  io.logits = output_slot(named(gout, "logits", "logits"));
  if (io.logits < 0)
    for (size_t i = 0; i < g.outputs.size() && io.logits < 0; ++i)
      for (const auto& t : tokens_of(g.outputs[i].name))
        if (t == "logits") io.logits = static_cast<int>(i);
  SY_CHECK(io.input_ids >= 0, path << ": not a decoder export: no token-ids input (input_ids); the graph's inputs are:"
                                   << list_values(g, true));
  SY_CHECK(io.logits >= 0, path << ": not a decoder export: no logits output; the graph's outputs are:" << list_values(g, false));

  // Past inputs and present outputs by layer.
  std::map<int, KvLayer> layers;
  std::set<int> claimed;
  auto claim_past = [&](int slot, int layer, bool is_key) {
    KvLayer& l = layers[layer];
    l.layer = layer;
    int& dst = is_key ? l.past_key : l.past_value;
    SY_CHECK(dst < 0, path << ": two past " << (is_key ? "key" : "value") << " inputs for layer " << layer << " ('"
                           << g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(dst)])].name << "' and '"
                           << g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(slot)])].name << "')");
    dst = slot;
    claimed.insert(slot);
  };
  if (genai && gin.count("past_key_names") && gin.count("past_value_names")) {
    for (int l = 0;; ++l) {
      int k = input_slot(pattern_name(gin.at("past_key_names"), l)), v = input_slot(pattern_name(gin.at("past_value_names"), l));
      if (k < 0 && v < 0) break;
      if (k >= 0) claim_past(k, l, true);
      if (v >= 0) claim_past(v, l, false);
      KvLayer& kl = layers[l];
      if (gout.count("present_key_names")) kl.present_key = output_slot(pattern_name(gout.at("present_key_names"), l));
      if (gout.count("present_value_names")) kl.present_value = output_slot(pattern_name(gout.at("present_value_names"), l));
    }
  } else {
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      int slot = static_cast<int>(i);
      if (slot == io.input_ids || slot == io.attention_mask || slot == io.position_ids) continue;
      KvName n = parse_kv(g.values[static_cast<size_t>(g.inputs[i])].name, true);
      if (n.ok) claim_past(slot, n.layer, n.is_key);
    }
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      KvName n = parse_kv(g.outputs[i].name, false);
      if (!n.ok) continue;
      KvLayer& l = layers[n.layer];
      l.layer = n.layer;
      (n.is_key ? l.present_key : l.present_value) = static_cast<int>(i);
    }
  }
  // Every input has a role (or is fed by the caller).
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int slot = static_cast<int>(i);
    const std::string& name = g.values[static_cast<size_t>(g.inputs[i])].name;
    bool known = slot == io.input_ids || slot == io.attention_mask || slot == io.position_ids || claimed.count(slot) ||
                 std::find(extra_inputs.begin(), extra_inputs.end(), name) != extra_inputs.end();
    SY_CHECK(known, path << ": graph input '" << name << "' has no role in the decoder-with-past interface (token ids, "
                         << "attention mask, position ids, past key/value per layer); the graph's inputs are:" << list_values(g, true));
  }
  int expect = 0;
  for (auto& [layer, l] : layers) {
    SY_CHECK(layer == expect++, path << ": past KV layers are not numbered 0..N-1 (missing layer " << expect - 1 << ")");
    if (l.past_key < 0 && l.past_value < 0) continue;  // present-only outputs: not a cache layer
    SY_CHECK(l.past_key >= 0 && l.past_value >= 0, path << ": layer " << layer << " lacks a past " << (l.past_key < 0 ? "key" : "value") << " input");
    SY_CHECK(fused || (l.present_key >= 0 && l.present_value >= 0),
             path << ": layer " << layer << " has past inputs but no present key/value outputs; the graph's outputs are:" << list_values(g, false));
    const Value& v = g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(l.past_key)])];
    SY_CHECK(v.shape && v.shape->size() == 4, path << ": '" << v.name << "' must have rank 4 ([batch, kv_heads, past, head_dim])");
    const auto& s = *v.shape;
    // Keys stored transposed ([B, H, D, T]) show a static dim 2 and a symbolic dim 3.
    l.key_seq_axis = s[2].is_static() && !s[3].is_static() && !(genai && genai->head_size > 0) ? 3 : 2;
    const Dim& heads = s[1];
    const Dim& dim = s[l.key_seq_axis == 2 ? 3 : 2];
    int64_t hd = dim.is_static() ? dim.value : (genai ? genai->head_size : 0);
    int64_t kvh = heads.is_static() ? heads.value : (genai ? genai->kv_heads : 0);
    SY_CHECK(kvh > 0 && hd > 0, path << ": '" << v.name << "' has shape " << v.shape_str()
                                    << "; kv_heads and head_dim must be static (or given by genai_config.json)");
    SY_CHECK((io.kv_heads == 0 || io.kv_heads == kvh) && (io.head_dim == 0 || io.head_dim == hd),
             path << ": layers differ in KV geometry; per-layer geometry is not supported");
    const Value& pv = g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(l.past_value)])];
    const int64_t vd = pv.shape && pv.shape->size() == 4 && (*pv.shape)[3].is_static() ? (*pv.shape)[3].value : hd;
    SY_CHECK(io.value_dim == 0 || io.value_dim == vd, path << ": layers differ in KV geometry; per-layer geometry is not supported");
    io.kv_heads = kvh;
    io.head_dim = hd;
    io.value_dim = vd;
    io.kv_dtype = v.dtype;
    io.layers.push_back(l);
  }
  io.right_padding = genai != nullptr && io.position_ids < 0;
  for (const Node& n : g.nodes)
    if (!n.dead && n.domain == SY_ORT_DOMAIN && n.op_type == SY_ORT_OP_GROUP_QUERY_ATTENTION && io.position_ids < 0) io.right_padding = true;
  return io;
}

}  // namespace sy
