#include "embeddings_endpoint.h"

#include <cstring>

namespace sy::server {

using json = nlohmann::ordered_json;

namespace {

// The texts or token-id lists of `input`, tokenized.
std::vector<std::vector<int32_t>> inputs_of(const json& body, const Tokenize& tokenize, bool add_special) {
  if (!body.contains("input")) throw bad_request("'input' is required", "input");
  const json& in = body["input"];
  std::vector<std::vector<int32_t>> out;
  auto text = [&](const json& s) {
    if (s.get_ref<const std::string&>().empty()) throw bad_request("'input' holds an empty string", "input");
    out.push_back(tokenize(s.get<std::string>(), add_special));
  };
  if (in.is_string()) {
    text(in);
  } else if (in.is_array() && !in.empty() && in[0].is_string()) {
    for (const auto& s : in) {
      if (!s.is_string()) throw bad_request("invalid type for 'input': a list mixing strings and other values", "input");
      text(s);
    }
  } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
    out.push_back(token_ids_of(in, "input"));
  } else if (in.is_array() && !in.empty() && in[0].is_array()) {
    for (const auto& ids : in) {
      if (!ids.is_array()) throw bad_request("invalid type for 'input': a list mixing token-id lists and other values", "input");
      out.push_back(token_ids_of(ids, "input"));
    }
  } else {
    throw bad_request("invalid type for 'input': expected a non-empty string, a list of strings, token ids or lists of token ids", "input");
  }
  return out;
}

}  // namespace

std::string base64_encode(const void* data, size_t size) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* b = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t n = (uint32_t{b[i]} << 16) | (i + 1 < size ? uint32_t{b[i + 1]} << 8 : 0u) | (i + 2 < size ? uint32_t{b[i + 2]} : 0u);
    out.push_back(digits[(n >> 18) & 63]);
    out.push_back(digits[(n >> 12) & 63]);
    out.push_back(i + 1 < size ? digits[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < size ? digits[n & 63] : '=');
  }
  return out;
}

nlohmann::json embeddings_request(sy_engine* engine, const std::string& body_text, const RequestLimits& limits, const Tokenize& tokenize) {
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded()) throw bad_request("the body is not valid JSON");
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  if (body.contains("model") && !body["model"].is_string()) throw bad_request("invalid type for 'model': expected a string", "model");
  const std::string model = body.value("model", limits.model_name);
  if (model != limits.model_name)
    throw ApiError{404, "The model '" + model + "' does not exist; this server serves '" + limits.model_name + "'", "invalid_request_error", "model",
                   "model_not_found"};
  std::string format = "float";
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    if (!body["encoding_format"].is_string()) throw bad_request("invalid type for 'encoding_format': expected a string", "encoding_format");
    format = body["encoding_format"].get<std::string>();
    if (format != "float" && format != "base64")
      throw bad_request("'encoding_format' must be 'float' or 'base64', got '" + format + "'", "encoding_format");
  }
  bool add_special = true;  // vLLM's add_special_tokens: the BOS a model's embeddings were trained with
  if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null()) {
    if (!body["add_special_tokens"].is_boolean()) throw bad_request("invalid type for 'add_special_tokens': expected a boolean", "add_special_tokens");
    add_special = body["add_special_tokens"].get<bool>();
  }
  // vLLM's pooling fields: the model's own convention is what is served.
  for (const char* key : {"truncate_prompt_tokens", "embed_dtype", "messages", "normalize", "softmax", "activation"})
    if (body.contains(key) && !body[key].is_null()) throw bad_request(std::string("'") + key + "' is not supported by /v1/embeddings", key);

  const std::vector<std::vector<int32_t>> inputs = inputs_of(body, tokenize, add_special);
  const int max_inputs = 2048;  // OpenAI's limit on one request's inputs
  if (static_cast<int>(inputs.size()) > max_inputs)
    throw bad_request("'input' holds " + std::to_string(inputs.size()) + " items; at most " + std::to_string(max_inputs) + " per request", "input");
  const int32_t vocab = limits.vocab_size;
  int64_t tokens = 0;
  for (const auto& ids : inputs) {
    if (ids.empty()) throw bad_request("'input' holds an empty token list", "input");
    if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
      throw bad_request("This model's maximum input length is " + std::to_string(limits.max_prompt_tokens) + " tokens. However, you requested " +
                            std::to_string(ids.size()) + " tokens.",
                        "input", "context_length_exceeded");
    for (int32_t id : ids)
      if (vocab > 0 && id >= vocab)
        throw bad_request("'input' holds token id " + std::to_string(id) + ", outside the vocabulary (0 to " + std::to_string(vocab - 1) + ")", "input");
    tokens += static_cast<int64_t>(ids.size());
  }

  int32_t dim = 0;
  json data = json::array();
  std::vector<float> v(8192);  // wider than most models; grown (one more forward) when not
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& ids = inputs[i];
    auto embed = [&] { return sy_embed(engine, ids.data(), static_cast<int32_t>(ids.size()), v.data(), static_cast<int64_t>(v.size()), &dim); };
    sy_api_status st = embed();
    if (st != SY_API_OK && dim > static_cast<int32_t>(v.size())) {
      v.resize(static_cast<size_t>(dim));
      st = embed();
    }
    if (st != SY_API_OK)
      throw ApiError{400, std::string("embeddings are not available for this model: ") + sy_last_error(), "invalid_request_error", "model", ""};
    v.resize(static_cast<size_t>(dim));
    if (i == 0 && body.contains("dimensions") && !body["dimensions"].is_null()) {
      const json& d = body["dimensions"];
      if (!d.is_number_integer() || d.get<int64_t>() != dim)
        throw bad_request("'dimensions' must be the model's own size, " + std::to_string(dim) + ": its embeddings are not Matryoshka-trained",
                          "dimensions");
    }
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") item["embedding"] = base64_encode(v.data(), v.size() * sizeof(float));
    else item["embedding"] = v;
    data.push_back(std::move(item));
  }
  return json{{"object", "list"}, {"data", std::move(data)}, {"model", limits.model_name},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

}  // namespace sy::server
