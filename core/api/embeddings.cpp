// The C API's embeddings (1.7): a text's final hidden states pooled by the
// model's convention (sy::Engine::embedding, ModelFolder's convention).
#include <algorithm>
#include <cstring>

#include "api/api_internal.h"

using namespace sy::api;

namespace {
// Floats to a caller's buffer: with out NULL nothing (the caller asked for the
// size only), else all of them or an error naming the call and both sizes.
sy_api_status copy_floats(const char* call, const char* what, const std::vector<float>& v, float* out, int64_t capacity) {
  if (!out) return static_cast<sy_api_status>(SY_API_OK);
  if (capacity < static_cast<int64_t>(v.size()))
    return fail(SY_API_INVALID_ARGUMENT, std::string(call) + ": out holds " + std::to_string(capacity) + " floats; " + what + " " +
                                             std::to_string(v.size()));
  std::memcpy(out, v.data(), v.size() * sizeof(float));
  return static_cast<sy_api_status>(SY_API_OK);
}
}  // namespace

extern "C" {

sy_api_status sy_embed(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity, int32_t* dim) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !ids || num_ids <= 0 || !dim) return fail(SY_API_INVALID_ARGUMENT, "sy_embed: engine, ids (num_ids > 0) and dim are required");
    const std::vector<float> v = engine->engine->embedding(std::vector<int>(ids, ids + num_ids));
    *dim = static_cast<int32_t>(v.size());
    return copy_floats("sy_embed", "the embedding has", v, out, capacity);
  });
}

sy_api_status sy_engine_embedding_info(sy_engine* engine, char* json, int64_t capacity, int64_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !length || capacity < 0 || (capacity > 0 && !json))
      return fail(SY_API_INVALID_ARGUMENT, "sy_engine_embedding_info: engine and length are required (json when capacity > 0)");
    const sy::EmbeddingConvention& c = engine->engine->embedding_convention();
    const nlohmann::ordered_json j = {{"pooling", sy::pooling_name(c.pooling)}, {"normalize", c.normalize}, {"source", c.source}};
    const std::string s = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    *length = static_cast<int64_t>(s.size());
    if (capacity > 0) std::memcpy(json, s.data(), static_cast<size_t>(std::min<int64_t>(capacity, *length)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_hidden_states(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity, int32_t* dim) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !ids || num_ids <= 0 || !dim)
      return fail(SY_API_INVALID_ARGUMENT, "sy_hidden_states: engine, ids (num_ids > 0) and dim are required");
    int64_t d = 0;
    const std::vector<float> v = engine->engine->hidden_states(std::vector<int>(ids, ids + num_ids), &d);
    *dim = static_cast<int32_t>(d);
    return copy_floats("sy_hidden_states", "the hidden states have", v, out, capacity);
  });
}

sy_api_status sy_lm_head(sy_engine* engine, const float* rows, int32_t num_rows, int32_t dim, float* out, int64_t capacity, int32_t* vocab) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !rows || num_rows <= 0 || dim <= 0 || !vocab)
      return fail(SY_API_INVALID_ARGUMENT, "sy_lm_head: engine, rows (num_rows > 0, dim > 0) and vocab are required");
    int64_t v = 0;
    const std::vector<float> logits = engine->engine->project_hidden(rows, num_rows, dim, &v);
    *vocab = static_cast<int32_t>(v);
    return copy_floats("sy_lm_head", "the logits have", logits, out, capacity);
  });
}

}  // extern "C"
