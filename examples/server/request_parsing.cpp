#include "request_parsing.h"

#include <nlohmann/json.hpp>

namespace sy::server {

using json = nlohmann::json;

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return {400, message, "invalid_request_error", param, code};
}

namespace {

template <typename T>
T field(const json& body, const char* key, T fallback, const char* type_name) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                 v.get<int64_t>() <= std::numeric_limits<T>::max() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX);
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  if (!ok) throw bad_request(std::string("invalid type for '") + key + "': expected " + type_name, key);
  return v.get<T>();
}

Sampling parse_sampling(const json& body, const RequestLimits& limits) {
  Sampling s;
  s.max_tokens = field<int>(body, "max_tokens", 16, "an integer");
  if (body.contains("max_completion_tokens")) s.max_tokens = field<int>(body, "max_completion_tokens", 16, "an integer");
  if (s.max_tokens < 1) throw bad_request("max_tokens must be >= 1, got " + std::to_string(s.max_tokens), "max_tokens");
  if (s.max_tokens > limits.max_tokens)
    throw bad_request("max_tokens is " + std::to_string(s.max_tokens) + ", over this server's limit of " + std::to_string(limits.max_tokens),
                      "max_tokens");
  s.temperature = field<double>(body, "temperature", 1.0, "a number");
  if (!(s.temperature >= 0 && s.temperature <= 2)) throw bad_request("temperature must be in [0, 2]", "temperature");
  s.top_p = field<double>(body, "top_p", 1.0, "a number");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw bad_request("top_p must be in (0, 1]", "top_p");
  s.n = field<int>(body, "n", 1, "an integer");
  if (s.n < 1 || s.n > limits.max_n) throw bad_request("n must be in [1, " + std::to_string(limits.max_n) + "]", "n");
  s.seed = field<int64_t>(body, "seed", -1, "an integer");
  s.stream = field<bool>(body, "stream", false, "a boolean");
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& st = body["stop"];
    const std::string expected = "invalid type for 'stop': expected a string or an array of up to " + std::to_string(limits.max_stop) + " strings";
    if (st.is_string()) s.stop.push_back(st.get<std::string>());
    else if (st.is_array() && st.size() <= static_cast<size_t>(limits.max_stop)) {
      for (const auto& x : st) {
        if (!x.is_string()) throw bad_request(expected, "stop");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request(expected, "stop");
    }
    for (const auto& x : s.stop)
      if (x.empty() || x.size() > limits.max_stop_bytes)
        throw bad_request("each stop sequence must have 1 to " + std::to_string(limits.max_stop_bytes) + " bytes", "stop");
  }
  return s;
}

std::vector<std::vector<int32_t>> parse_prompts(const json& body, bool chat, const RequestLimits& limits, const Tokenize& tokenize) {
  std::vector<std::vector<int32_t>> out;
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      throw bad_request("'messages' must be a non-empty array", "messages");
    // A plain template: the model was not tuned for chat, so the
    // conversation is given as text and the model continues it.
    std::string text;
    for (const auto& m : body["messages"]) {
      if (!m.is_object() || !m.contains("content") || !m["content"].is_string())
        throw bad_request("each message needs a string 'content'", "messages");
      if (m.contains("role") && !m["role"].is_string()) throw bad_request("invalid type for 'role': expected a string", "messages");
      if (!text.empty()) text.push_back('\n');
      text.append(m["content"].get_ref<const std::string&>());
    }
    if (text.empty()) throw bad_request("the messages are empty", "messages");
    out.push_back(tokenize(text));
  } else {
    if (!body.contains("prompt")) throw bad_request("'prompt' is required", "prompt");
    const json& p = body["prompt"];
    auto ids_of = [&](const json& arr) {
      std::vector<int32_t> ids;
      for (const auto& x : arr) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX || (x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX))
          throw bad_request("invalid 'prompt': token ids must be integers in [0, 2^31)", "prompt");
        ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
      return ids;
    };
    if (p.is_string()) {
      if (p.get<std::string>().empty()) throw bad_request("the prompt is empty", "prompt");
      out.push_back(tokenize(p.get<std::string>()));
    } else if (p.is_array() && !p.empty() && p[0].is_string()) {
      for (const auto& x : p) {
        if (!x.is_string()) throw bad_request("invalid type for 'prompt': mixed array", "prompt");
        if (x.get<std::string>().empty()) throw bad_request("the prompt is empty", "prompt");
        out.push_back(tokenize(x.get<std::string>()));
      }
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      out.push_back(ids_of(p));
    } else if (p.is_array() && !p.empty() && p[0].is_array()) {
      for (const auto& x : p) out.push_back(ids_of(x));
    } else {
      throw bad_request("invalid type for 'prompt': expected a string, an array of strings, or token ids", "prompt");
    }
  }
  for (const auto& ids : out) {
    if (ids.empty()) throw bad_request("the prompt is empty", "prompt");
    if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
      throw bad_request("This model's maximum prompt length is " + std::to_string(limits.max_prompt_tokens) + " tokens. However, you requested " +
                            std::to_string(ids.size()) + " tokens.",
                        "prompt", "context_length_exceeded");
  }
  return out;
}

}  // namespace

ParsedRequest parse_request(const std::string& body_text, bool chat, const RequestLimits& limits, const Tokenize& tokenize) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const std::exception& e) {
    throw bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  if (body.contains("model") && !body["model"].is_string()) throw bad_request("invalid type for 'model': expected a string", "model");
  std::string model = body.value("model", limits.model_name);
  if (model != limits.model_name)
    throw ApiError{404, "The model '" + model + "' does not exist; this server serves '" + limits.model_name + "'", "invalid_request_error", "model",
                   "model_not_found"};
  ParsedRequest r;
  r.sampling = parse_sampling(body, limits);
  if (body.contains("ignore_eos")) {
    if (!body["ignore_eos"].is_boolean()) throw bad_request("invalid type for 'ignore_eos': expected a boolean", "ignore_eos");
    r.sampling.ignore_eos = body["ignore_eos"].get<bool>();
  }
  if (body.contains("return_token_ids")) {
    if (!body["return_token_ids"].is_boolean()) throw bad_request("invalid type for 'return_token_ids': expected a boolean", "return_token_ids");
    r.return_token_ids = body["return_token_ids"].get<bool>();
  }
  r.prompts = parse_prompts(body, chat, limits, tokenize);
  return r;
}

}  // namespace sy::server
