#include "responses_api.h"

#include <set>

#include "request_parsing.h"

namespace sy::server {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Text of a content given as a string or as parts (input_text,
// output_text, text); anything else (images, files, audio) is refused.
std::string text_of(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) throw bad_request("invalid type for '" + param + "' content: expected a string or a list of parts", param);
  std::string text;
  for (const json& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type == "input_text" || type == "output_text" || type == "text") && part.contains("text") && part["text"].is_string())
      text += part["text"].get<std::string>();
    else
      throw bad_request("content parts of type '" + type + "' are not supported (text only)", param);
  }
  return text;
}

json messages_from_input(const json& input) {
  json messages = json::array();
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array() || input.empty()) throw bad_request("'input' must be a string or a non-empty list of items", "input");
  for (const json& item : input) {
    if (!item.is_object()) throw bad_request("each 'input' item must be an object", "input");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) throw bad_request("an input message needs a 'role'", "input");
      messages.push_back({{"role", item["role"]}, {"content", text_of(item.value("content", json()), "input")}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string()) throw bad_request(std::string("a function_call item needs '") + key + "'", "input");
      json call = {{"id", item["call_id"]}, {"type", "function"}, {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Consecutive calls are one assistant turn with several tool calls.
      if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls"))
        messages.back()["tool_calls"].push_back(call);
      else
        messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) throw bad_request("a function_call_output item needs 'call_id'", "input");
      const json& output = item.value("output", json());
      messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output.is_string() ? output.get<std::string>() : text_of(output, "input")}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not fed back (as chat templates drop it)
    } else {
      throw bad_request("input items of type '" + type + "' are not supported (message, function_call, function_call_output, reasoning)", "input");
    }
  }
  return messages;
}

json chat_tools(const json& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be a list", "tools");
  json out = json::array();
  for (const json& t : tools) {
    const std::string type = t.is_object() ? t.value("type", "") : "";
    if (type != "function")
      throw bad_request("tools of type '" + type + "' are not supported (function: this server runs no built-in tools)", "tools");
    if (!t.contains("name") || !t["name"].is_string()) throw bad_request("a function tool needs a 'name'", "tools");
    json f = {{"name", t["name"]}};
    if (t.contains("description") && !t["description"].is_null()) f["description"] = t["description"];
    if (t.contains("parameters") && !t["parameters"].is_null()) f["parameters"] = t["parameters"];
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

json chat_tool_choice(const json& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  throw bad_request("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}", "tool_choice");
}

json chat_response_format(const json& text) {
  if (!text.is_object()) throw bad_request("'text' must be an object", "text");
  for (const auto& [key, value] : text.items())
    if (key != "format" && !value.is_null()) throw bad_request("'text." + key + "' is not supported (format)", "text");
  if (!text.contains("format") || text["format"].is_null()) return nullptr;
  const json& f = text["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type == "json_schema") {
    if (!f.contains("schema")) throw bad_request("'text.format' of type json_schema needs a 'schema'", "text");
    json js = {{"name", f.value("name", "response")}, {"schema", f["schema"]}};
    if (f.contains("strict") && !f["strict"].is_null()) js["strict"] = f["strict"];
    return {{"type", "json_schema"}, {"json_schema", js}};
  }
  throw bad_request("'text.format' must be of type text, json_object or json_schema", "text");
}

}  // namespace

json chat_request_from_responses(const std::string& body) {
  json req;
  try {
    req = json::parse(body);
  } catch (const json::exception&) {
    throw bad_request("the request body is not JSON");
  }
  if (!req.is_object()) throw bad_request("the request body must be a JSON object");
  // What a server that keeps no responses and runs no built-in tools
  // cannot do: refused by name, never dropped.
  static const std::set<std::string> stateful = {"previous_response_id", "conversation", "background", "prompt"};
  static const std::set<std::string> known = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                              "tool_choice", "parallel_tool_calls", "stream", "text", "reasoning", "metadata", "user",
                                              "store", "truncation", "include", "service_tier"};
  for (const auto& [key, value] : req.items()) {
    if (value.is_null()) continue;
    if (stateful.count(key)) throw bad_request("'" + key + "' is not supported: this server keeps no responses or conversations", key);
    if (!known.count(key)) throw bad_request("'" + key + "' is not supported", key);
  }
  auto given = [&](const char* key) { return req.contains(key) && !req[key].is_null(); };
  if (given("store") && req["store"] != false)
    throw bad_request("'store' is not supported: this server keeps no responses (send store: false)", "store");
  if (given("include") && !(req["include"].is_array() && req["include"].empty())) throw bad_request("'include' is not supported", "include");
  if (given("truncation") && req["truncation"] != "disabled") throw bad_request("'truncation' is not supported (disabled)", "truncation");
  if (given("service_tier") && req["service_tier"] != "auto" && req["service_tier"] != "default")
    throw bad_request("'service_tier' is not supported (auto)", "service_tier");
  if (!given("input")) throw bad_request("'input' is required", "input");

  json chat = json::object();
  if (given("model")) chat["model"] = req["model"];
  json messages = json::array();
  if (given("instructions")) {
    if (!req["instructions"].is_string()) throw bad_request("'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", req["instructions"]}});
  }
  for (json& m : messages_from_input(req["input"])) messages.push_back(std::move(m));
  chat["messages"] = messages;
  if (given("max_output_tokens")) chat["max_tokens"] = req["max_output_tokens"];
  for (const char* key : {"temperature", "top_p", "parallel_tool_calls", "user"})
    if (given(key)) chat[key] = req[key];
  if (given("tools")) chat["tools"] = chat_tools(req["tools"]);
  if (given("tool_choice")) chat["tool_choice"] = chat_tool_choice(req["tool_choice"]);
  if (given("text"))
    if (json f = chat_response_format(req["text"]); !f.is_null()) chat["response_format"] = f;
  if (given("reasoning")) {
    const json& r = req["reasoning"];
    if (!r.is_object()) throw bad_request("'reasoning' must be an object", "reasoning");
    for (const auto& [key, value] : r.items())
      if (key != "effort" && !value.is_null()) throw bad_request("'reasoning." + key + "' is not supported (effort)", "reasoning");
    if (r.contains("effort") && !r["effort"].is_null()) chat["reasoning_effort"] = r["effort"];
  }
  if (given("stream") && req["stream"] == true) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};  // the final response carries it
  }
  return chat;
}

// ---- the answer

ResponseBuilder::ResponseBuilder(json request, std::string id, int64_t created)
    : request_(std::move(request)), id_(std::move(id)), created_(created) {}

json ResponseBuilder::shell(const std::string& status) const {
  auto echo = [&](const char* key, json fallback) { return request_.contains(key) && !request_[key].is_null() ? request_[key] : fallback; };
  json text = echo("text", json{{"format", {{"type", "text"}}}});
  return {{"id", id_},
          {"object", "response"},
          {"created_at", created_},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", echo("instructions", nullptr)},
          {"max_output_tokens", echo("max_output_tokens", nullptr)},
          {"model", echo("model", "")},
          {"output", json::array()},
          {"parallel_tool_calls", echo("parallel_tool_calls", true)},
          {"temperature", echo("temperature", nullptr)},
          {"top_p", echo("top_p", nullptr)},
          {"tool_choice", echo("tool_choice", "auto")},
          {"tools", echo("tools", json::array())},
          {"text", text},
          {"reasoning", echo("reasoning", nullptr)},
          {"store", false},
          {"metadata", echo("metadata", json::object())},
          {"usage", nullptr}};
}

json ResponseBuilder::usage_of(const json& u) const {
  if (!u.is_object()) return nullptr;
  const int cached = u.contains("prompt_tokens_details") ? u["prompt_tokens_details"].value("cached_tokens", 0) : 0;
  return {{"input_tokens", u.value("prompt_tokens", 0)},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", u.value("completion_tokens", 0)},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.value("total_tokens", 0)}};
}

json ResponseBuilder::item_json(const Item& it) const {
  const std::string status = it.open ? "in_progress" : "completed";
  if (it.type == "message")
    return {{"type", "message"}, {"id", it.id}, {"status", status}, {"role", "assistant"},
            {"content", it.open ? json::array() : json::array({{{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}}})}};
  if (it.type == "reasoning")
    return {{"type", "reasoning"}, {"id", it.id}, {"summary", json::array()},
            {"content", it.open ? json::array() : json::array({{{"type", "reasoning_text"}, {"text", it.text}}})}};
  return {{"type", "function_call"}, {"id", it.id}, {"call_id", it.call_id}, {"name", it.name}, {"arguments", it.open ? "" : it.text},
          {"status", status}};
}

json ResponseBuilder::from_chat(const json& completion) const {
  const std::string finish = completion["choices"][0].value("finish_reason", "stop");
  json r = shell(finish == "length" ? "incomplete" : "completed");
  if (finish == "length") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  const json& msg = completion["choices"][0]["message"];
  const std::string suffix = id_.substr(id_.find('_') + 1);
  if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string() && !msg["reasoning_content"].get<std::string>().empty())
    r["output"].push_back(item_json({"reasoning", "rs_" + suffix, msg["reasoning_content"], "", "", false}));
  if (msg.contains("content") && msg["content"].is_string() && !msg["content"].get<std::string>().empty())
    r["output"].push_back(item_json({"message", "msg_" + suffix, msg["content"], "", "", false}));
  if (msg.contains("tool_calls"))
    for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
      const json& c = msg["tool_calls"][i];
      r["output"].push_back(item_json({"function_call", "fc_" + suffix + "_" + std::to_string(i), c["function"]["arguments"], c["id"],
                                       c["function"]["name"], false}));
    }
  r["usage"] = usage_of(completion.value("usage", json()));
  return r;
}

// ---- streamed

void ResponseBuilder::send(const std::string& type, json payload, std::string& out) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_++;
  out += "event: " + type + "\ndata: " + dump(payload) + "\n\n";
}

void ResponseBuilder::start(std::string& out) {
  if (started_) return;
  started_ = true;
  send("response.created", {{"response", shell("in_progress")}}, out);
  send("response.in_progress", {{"response", shell("in_progress")}}, out);
}

ResponseBuilder::Item& ResponseBuilder::open_item(const std::string& type, std::string& out, const std::string& call_id, const std::string& name) {
  if (!items_.empty() && items_.back().open) {
    if (items_.back().type == type && type != "function_call") return items_.back();
    close(items_.back(), out);
  }
  const std::string suffix = id_.substr(id_.find('_') + 1) + "_" + std::to_string(items_.size());
  const std::string prefix = type == "message" ? "msg_" : type == "reasoning" ? "rs_" : "fc_";
  items_.push_back({type, prefix + suffix, "", call_id, name, true});
  Item& it = items_.back();
  const auto index = static_cast<int64_t>(items_.size() - 1);
  send("response.output_item.added", {{"output_index", index}, {"item", item_json(it)}}, out);
  if (type == "message")
    send("response.content_part.added",
         {{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
         out);
  return it;
}

void ResponseBuilder::close(Item& it, std::string& out) {
  if (!it.open) return;
  const auto index = static_cast<int64_t>(&it - items_.data());
  if (it.type == "message") {
    send("response.output_text.done", {{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"text", it.text}, {"logprobs", json::array()}},
         out);
    send("response.content_part.done",
         {{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"part", {{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}}}},
         out);
  } else if (it.type == "reasoning") {
    send("response.reasoning_text.done", {{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"text", it.text}}, out);
  } else {
    send("response.function_call_arguments.done", {{"item_id", it.id}, {"output_index", index}, {"name", it.name}, {"arguments", it.text}}, out);
  }
  it.open = false;
  send("response.output_item.done", {{"output_index", index}, {"item", item_json(it)}}, out);
}

void ResponseBuilder::on_chunk(const json& chunk, std::string& out) {
  start(out);
  if (chunk.contains("usage") && !chunk["usage"].is_null()) usage_ = chunk["usage"];
  for (const json& choice : chunk.value("choices", json::array())) {
    const json& delta = choice.value("delta", json::object());
    auto text_delta = [&](const char* key, const std::string& type, const char* event) {
      if (!delta.contains(key) || !delta[key].is_string() || delta[key].get<std::string>().empty()) return;
      Item& it = open_item(type, out);
      it.text += delta[key].get<std::string>();
      json payload = {{"item_id", it.id}, {"output_index", static_cast<int64_t>(items_.size() - 1)}, {"content_index", 0}, {"delta", delta[key]}};
      if (type == "message") payload["logprobs"] = json::array();
      send(event, std::move(payload), out);
    };
    text_delta("reasoning_content", "reasoning", "response.reasoning_text.delta");
    text_delta("content", "message", "response.output_text.delta");
    for (const json& call : delta.value("tool_calls", json::array())) {
      const auto index = call.value("index", 0);
      if (call.contains("id")) {  // a new call: its first delta names it
        const json& f = call.value("function", json::object());
        open_item("function_call", out, call["id"].get<std::string>(), f.value("name", ""));
        if (call_items_.size() <= static_cast<size_t>(index)) call_items_.resize(static_cast<size_t>(index) + 1);
        call_items_[static_cast<size_t>(index)] = items_.size() - 1;
      }
      if (static_cast<size_t>(index) >= call_items_.size()) continue;
      const std::string args = call.contains("function") ? call["function"].value("arguments", "") : "";
      if (args.empty()) continue;
      Item& it = items_[call_items_[static_cast<size_t>(index)]];
      it.text += args;
      send("response.function_call_arguments.delta",
           {{"item_id", it.id}, {"output_index", static_cast<int64_t>(call_items_[static_cast<size_t>(index)])}, {"delta", args}}, out);
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) finish_reason_ = choice["finish_reason"];
  }
}

void ResponseBuilder::on_error(const std::string& message, std::string& out) {
  start(out);
  send("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}}, out);
}

void ResponseBuilder::finish(std::string& out) {
  start(out);
  for (Item& it : items_) close(it, out);
  const bool incomplete = finish_reason_ == "length";
  json r = shell(incomplete ? "incomplete" : "completed");
  if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const Item& it : items_) r["output"].push_back(item_json(it));
  r["usage"] = usage_of(usage_);
  send(incomplete ? "response.incomplete" : "response.completed", {{"response", r}}, out);
}

}  // namespace sy::server
