// OpenAI's Responses API (/v1/responses) over the chat protocol: a request
// becomes the chat completion request it means (instructions as the system
// message, input items as messages and tool results, tools and
// text.format as chat's), and the chat answer, whole or as chunks, becomes
// a response object or its typed server-sent events. This server keeps no
// responses: store, previous_response_id and conversations are refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sy::server {

// The chat completion request a Responses request means; throws ApiError
// (400 naming the field) for what it cannot honour.
nlohmann::json chat_request_from_responses(const std::string& body);

// One response, built from the chat answer.
class ResponseBuilder {
 public:
  // request: the Responses request (its echoed fields); id: "resp_...".
  ResponseBuilder(nlohmann::json request, std::string id, int64_t created);

  // The whole answer: a chat.completion object in, a response object out.
  nlohmann::json from_chat(const nlohmann::json& completion) const;

  // Streamed: a chat.completion.chunk in, the events it makes appended to
  // out ("event: TYPE\ndata: {...}\n\n"). The first call also sends
  // response.created and response.in_progress.
  void on_chunk(const nlohmann::json& chunk, std::string& out);
  // An engine error in the middle of a stream.
  void on_error(const std::string& message, std::string& out);
  // The end: closes open items, then response.completed (or .incomplete).
  void finish(std::string& out);

 private:
  struct Item {
    std::string type;  // "message", "reasoning", "function_call"
    std::string id, text, call_id, name;
    bool open = true;
  };
  nlohmann::json shell(const std::string& status) const;
  nlohmann::json item_json(const Item& it) const;
  void send(const std::string& type, nlohmann::json payload, std::string& out);
  void start(std::string& out);
  Item& open_item(const std::string& type, std::string& out, const std::string& call_id = "", const std::string& name = "");
  void close(Item& it, std::string& out);
  nlohmann::json usage_of(const nlohmann::json& chat_usage) const;

  nlohmann::json request_;
  std::string id_;
  int64_t created_;
  int64_t sequence_ = 0;
  bool started_ = false;
  std::string finish_reason_;
  nlohmann::json usage_;
  std::vector<Item> items_;
  std::vector<size_t> call_items_;  // item index per chat tool-call index
};

}  // namespace sy::server
