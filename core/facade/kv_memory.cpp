#include "facade/kv_memory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "engine/session.h"
#include "graph/graph.h"
#include "plugin_host/components.h"
#include "switchyard/plugin.h"

namespace sy {
namespace {

// config.json's latent-attention sizes (DeepSeek V2/V3, Kimi K2), if any.
// Their exports cache the latent: one compressed vector (kv_lora_rank) and
// the rotary key (qk_rope_head_dim) per token and layer, as one KV "head".
// Multi-head attention would cache every head's keys (qk_nope + qk_rope)
// and values (v_head_dim): the row that shows what the latent saves.
struct Latent {
  int64_t heads = 0, key = 0, value = 0;
};

Latent latent_of(const std::string& dir) {
  Latent l;
  const std::filesystem::path cfg = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  if (dir.empty() || !std::filesystem::exists(cfg, ec)) return l;
  try {
    std::ifstream in(cfg);
    const nlohmann::json j = nlohmann::json::parse(in);
    auto get = [&](const char* k) { return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : 0; };
    if (get("kv_lora_rank") <= 0) return l;
    l.heads = get("num_attention_heads");
    l.key = get("qk_nope_head_dim") + get("qk_rope_head_dim");
    l.value = get("v_head_dim");
  } catch (const std::exception&) {
    return Latent{};  // a malformed config is the model folder's error to report, not this table's
  }
  return l;
}

}  // namespace

nlohmann::json kv_memory_report(Session& s, int64_t S, int64_t memory_bytes) {
  const DecoderModel& m = s.model();
  const int64_t L = m.num_layers(), KVH = m.kv_heads(), Dk = m.head_dim(), Dv = m.value_dim();
  const int64_t width = KVH * (Dk + Dv);  // elements per token and layer, keys and values
  // Sliding windows per layer (what attention fusion read from the mask).
  std::vector<int64_t> windows;
  for (const Node& n : m.graph().nodes)
    if (!n.dead && n.domain == SY_OP_DOMAIN && n.op_type == SY_OP_PAGED_ATTENTION) windows.push_back(n.attr_int("window", 0));
  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](const std::string& strategy, const std::string& status, int64_t per_token_layer_bytes_x16, const std::string& how,
                 bool windowed = false) {
    // per_token_layer_bytes_x16: bytes per token and layer, times 16 (int8's
    // per-block scales are 1/16 of a value per token).
    int64_t seq = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t w = windowed && l < static_cast<int64_t>(windows.size()) && windows[static_cast<size_t>(l)] > 0 ? windows[static_cast<size_t>(l)] : S;
      seq += std::min(S, w) * per_token_layer_bytes_x16;
    }
    seq /= 16;
    const int64_t per_token = L * per_token_layer_bytes_x16 / 16;
    rows.push_back({{"strategy", strategy},
                    {"status", status},
                    {"bytes_per_token", per_token},
                    {"bytes_per_sequence", seq},
                    {"sequences", seq > 0 ? memory_bytes / seq : 0},
                    {"how", how}});
  };
  const int64_t exported = static_cast<int64_t>(dtype_size(m.kv_dtype()));
  std::ostringstream seed;
  seed << "2 · B · S · L · H · M = 2 · 1 · " << S << " · " << L << " · " << KVH * Dk << " · " << exported << " = " << 2 * S * L * KVH * Dk * exported
       << " bytes per sequence";
  if (Dk != Dv) seed << " (keys and values differ in size here: " << S << " · " << L << " · " << KVH << " · (" << Dk << " + " << Dv << ") · " << exported
                     << " = " << S * L * width * exported << ")";
  row("as exported (" + std::string(dtype_name(m.kv_dtype())) + ")", "runs", 16 * width * exported, "the graph's past/present tensors");
  row("paged fp32", "runs", 16 * width * 4, "cache dtype fp32");
  row("paged fp16 / bf16", "runs", 16 * width * 2, "cache dtype fp16 or bf16");
  // A byte a value and an fp16 scale per token and head, for keys and for values (SY_KV_ROW_*).
  row("paged int8, a scale per token and head", "runs", 16 * (width + 2 * KVH * SY_KV_ROW_SCALE_BYTES), "cache dtype int8");
  row("paged fp8 e4m3, a scale per token and head", "runs", 16 * (width + 2 * KVH * SY_KV_ROW_SCALE_BYTES), "cache dtype fp8");
  const bool any_window = std::any_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; });
  if (any_window) row("paged fp16 with the model's sliding windows", "runs", 16 * width * 2, "windowed layers keep their window's tokens", true);
  if (KVH > 1) row("paged fp16, KV heads pooled to 1 (MQA)", "runs (attention-fusion kv_heads=1; changes outputs)", 16 * (Dk + Dv) * 2,
                   "mean-pooled KV heads, the GQA paper's conversion");
  const Latent lat = latent_of(s.folder().dir());
  if (lat.heads > 0 && lat.key > 0 && lat.value > 0)
    row("latent attention's heads expanded (what MHA would cache, fp16)", "for comparison", 16 * lat.heads * (lat.key + lat.value) * 2,
        std::to_string(lat.heads) + " heads of " + std::to_string(lat.key) + " + " + std::to_string(lat.value) +
            " values; the export caches the latent instead (" + std::to_string(KVH) + " x (" + std::to_string(Dk) + " + " +
            std::to_string(Dv) + ") values a token and layer)");
  nlohmann::json j{{"layers", L},       {"kv_heads", KVH},   {"key_size", Dk},       {"value_size", Dv},
                   {"sequence_tokens", S}, {"memory_bytes", memory_bytes}, {"seed_formula", seed.str()}, {"strategies", rows}};
  if (PluginCacheManager* cm = s.cache_manager()) {
    const sy_tensor k = cm->storage(0).first;
    int64_t per_block = 0;
    for (int64_t l = 0; l < L; ++l) {
      const auto kv = cm->storage(static_cast<int>(l));
      for (const sy_tensor& t : {kv.first, kv.second}) {
        int64_t n = 1;
        for (int32_t d = 1; d < t.rank; ++d) n *= t.dims[d];
        per_block += n * static_cast<int64_t>(dtype_size(static_cast<DType>(t.dtype)));
      }
    }
    const int64_t block_tokens = k.rank == 4 ? k.dims[2] : 0;
    j["in_use"] = {{"blocks", k.dims[0]},
                   {"block_tokens", block_tokens},
                   {"bytes_per_token", block_tokens > 0 ? per_block / block_tokens : 0},
                   {"reserved_bytes", per_block * k.dims[0]}};
  }
  return j;
}

}  // namespace sy
