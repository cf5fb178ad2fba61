// OpenAI's protocol over the embedding API, without a transport: a request
// body in, the response JSON (or, streamed, its server-sent events) out.
// `switchyard serve` puts HTTP around it (openai_server.cpp); the Python
// package exposes it so the Ray deployment serves exactly the same API
// through the same code. Written against switchyard.h only.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "request_parsing.h"
#include "server_metrics.h"
#include "switchyard/switchyard.h"

namespace sy::server {

struct ProtocolOptions {
  std::string model_name;      // the served id ("": the model file's name)
  int max_prompt_tokens = 0;   // 0: the model's context limit
  int max_tokens_limit = 4096;
  int max_n = 8;
};

class Call;

// The generation endpoints: /v1/completions, /v1/chat/completions and
// /v1/responses (a chat request in other clothes, responses_api.h).
enum class Endpoint { completions, chat, responses };

class OpenAIProtocol {
 public:
  OpenAIProtocol(sy_engine* engine, ProtocolOptions options);
  ~OpenAIProtocol();

  // Parses the body and queues its engine requests. Throws ApiError (400
  // naming the field, 404 for another model, 503 when the engine cannot
  // take it).
  std::shared_ptr<Call> start(const std::string& body, Endpoint endpoint);
  // The token ids of each prompt a request would run, without running it
  // (a prefill deployment computes them before the decode one starts).
  std::vector<std::vector<int32_t>> prompts(const std::string& body, Endpoint endpoint) const;

  // The other endpoints' bodies (throw ApiError).
  nlohmann::json models() const;
  nlohmann::json model(const std::string& id) const;
  nlohmann::json tokenize(const std::string& body);
  nlohmann::json detokenize(const std::string& body) const;
  nlohmann::json embeddings(const std::string& body);
  const nlohmann::json& tokenizer_info() const { return tokenizer_info_; }
  const TemplateFacts& template_facts() const { return defaults_.template_facts; }
  std::string metrics() const;  // Prometheus text
  ServerMetrics& server_metrics() { return metrics_; }

  const std::string& model_name() const { return opt_.model_name; }
  // Calls not yet finished (a draining server waits for them).
  int in_flight() const { return in_flight_; }
  // Cancels every running request (shutdown after the grace period).
  void cancel_all();

 private:
  friend class Call;
  RequestLimits limits() const;
  Tokenize tokenizer() const;
  RenderChat chat_renderer() const;
  void track(sy_request* r, bool add);

  sy_engine* engine_;
  ProtocolOptions opt_;
  ServerMetrics metrics_;
  RequestLimits defaults_;  // the model's default sampling and template facts
  bool has_chat_template_ = false;
  nlohmann::json tokenizer_info_;
  int64_t started_ = 0;
  // Both start at random: unseeded requests and response ids differ
  // between processes too (replicas of one deployment, restarts).
  std::atomic<uint64_t> next_id_, next_seed_;
  std::atomic<int> in_flight_{0};
  std::mutex active_mu_;
  std::set<sy_request*> active_;
};

// One completion request: n * prompts engine requests behind one response.
class Call {
 public:
  ~Call();  // releases (and so cancels) whatever is still running
  bool streaming() const;
  // Not streamed: waits for every choice and returns the response (a
  // response object for /v1/responses); throws
  // ApiError (500) when the engine failed the request.
  nlohmann::json whole();
  // Not streamed: waits up to wait_ms for every choice to finish; true once
  // they have (whole() then returns at once).
  bool wait(int wait_ms);
  // Streamed: waits up to wait_ms for output, appends the server-sent
  // events it makes ("data: {...}\n\n", the last one "data: [DONE]\n\n";
  // /v1/responses: typed events, the last one response.completed) to out,
  // and returns true once the response is complete.
  bool next_events(std::string& out, int wait_ms);

 private:
  friend class OpenAIProtocol;
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace sy::server
