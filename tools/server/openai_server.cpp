// HTTP around the OpenAI protocol (openai_protocol.h): routes, the API key,
// CORS, draining on SIGTERM. What a request means and what its response
// says is the protocol's business, shared with the Ray deployment.
#include "openai_server.h"

#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "connection_watch.h"
#include "openai_protocol.h"

namespace sy::server {
namespace {

using json = nlohmann::json;

std::atomic<bool> g_signal{false};
extern "C" void on_signal(int) { g_signal = true; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Errors shaped like OpenAI's.
void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump({{"error", {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                                   {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}}),
                  "application/json");
}

class Server {
 public:
  Server(sy_engine* e, const ServerOptions& o)
      : opt_(o), protocol_(e, {o.model_name, o.max_prompt_tokens, o.max_tokens_limit, o.max_n}) {
    const json d = json::parse(sy_engine_sampling_defaults(e));
    if (d.contains("source")) std::fprintf(stderr, "switchyard serve: default sampling from %s\n", d["source"].get<std::string>().c_str());
    const bool renders_tools = protocol_.template_facts().renders_tools;
    std::fprintf(stderr, "switchyard serve: chat template: %s; tool calls read as %s%s\n",
                 *sy_engine_chat_template_name(e) ? sy_engine_chat_template_name(e) : "none (chat messages are joined as plain text)",
                 sy_engine_tool_parser(e), renders_tools ? "" : " (tools offered in a system message)");
  }

  int run() {
    httplib::Server svr;
    int threads = opt_.http_threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(opt_.max_body_bytes);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return gate(req, res); });
    svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) { add_cors(req, res); });
    svr.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      protocol_.server_metrics().http_error();
      if (!res.body.empty()) return;
      if (res.status == 413) send_error(res, {413, "request body larger than " + std::to_string(opt_.max_body_bytes) + " bytes", "invalid_request_error", "", "body_too_large"});
      else if (res.status == 404) send_error(res, {404, "no such endpoint", "invalid_request_error", "", "not_found"});
      else send_error(res, {res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""});
    });
    // Kubernetes-style probes: a draining server is not ready.
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_) res.status = 503;
      res.set_content(draining_ ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { answer(res, [&] { return protocol_.models(); }); });
    svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] { return protocol_.model(req.matches[1]); });
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(protocol_.metrics(), "text/plain; version=0.0.4"); });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, Endpoint::completions); });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, Endpoint::chat); });
    svr.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, Endpoint::responses); });
    svr.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) { answer(res, [&] { return protocol_.embeddings(req.body); }); });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { answer(res, [&] { return protocol_.tokenize(req.body); }); });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] { return protocol_.detokenize(req.body); });
    });
    svr.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) { answer(res, [&] { return protocol_.tokenizer_info(); }); });
    // CORS preflight: answered for any path (post-routing adds the headers).
    svr.Options(R"(.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::thread watcher([&] {
      while (!g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::fprintf(stderr, "switchyard serve: shutting down (finishing %d in-flight requests, at most %.0f s)\n", protocol_.in_flight(),
                   opt_.shutdown_timeout_s);
      draining_ = true;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.shutdown_timeout_s);
      while (protocol_.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      protocol_.cancel_all();
      while (protocol_.in_flight() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      svr.stop();
    });
    if (!svr.bind_to_port(opt_.host, opt_.port)) {
      std::fprintf(stderr, "switchyard serve: error: cannot listen on %s:%d\n", opt_.host.c_str(), opt_.port);
      g_signal = true;
      watcher.join();
      return 1;
    }
    std::fprintf(stderr, "switchyard serve: %s on http://%s:%d (OpenAI API under /v1)\n", protocol_.model_name().c_str(), opt_.host.c_str(),
                 opt_.port);
    svr.listen_after_bind();
    g_signal = true;
    watcher.join();
    return 0;
  }

 private:
  // Before routing: draining refuses new work; the API key guards the API
  // and the tokenizer endpoints (not /health, /metrics or CORS preflights).
  httplib::Server::HandlerResponse gate(const httplib::Request& req, httplib::Response& res) {
    const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" || req.path == "/tokenizer_info";
    if (req.method == "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
    if (draining_ && api) {
      send_error(res, {503, "the server is shutting down", "server_error", "", "shutting_down"});
      add_cors(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!opt_.api_key.empty() && api && req.get_header_value("Authorization") != "Bearer " + opt_.api_key) {
      send_error(res, {401, req.has_header("Authorization") ? "Incorrect API key provided" : "Missing API key: send 'Authorization: Bearer <key>'",
                       "invalid_request_error", "", "invalid_api_key"});
      add_cors(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void add_cors(const httplib::Request& req, httplib::Response& res) const {
    if (opt_.allowed_origins.empty() || !req.has_header("Origin")) return;
    const std::string origin = req.get_header_value("Origin");
    const std::string list = "," + opt_.allowed_origins + ",";
    if (opt_.allowed_origins != "*" && list.find("," + origin + ",") == std::string::npos) return;
    res.set_header("Access-Control-Allow-Origin", opt_.allowed_origins == "*" ? "*" : origin);
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", req.has_header("Access-Control-Request-Headers")
                                                       ? req.get_header_value("Access-Control-Request-Headers")
                                                       : "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "600");
  }

  template <typename F>
  void answer(httplib::Response& res, F&& f) {
    try {
      res.set_content(dump(f()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  void handle(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    std::shared_ptr<Call> call;
    try {
      call = protocol_.start(req.body, endpoint);
      if (!call->streaming()) {
        // A client that goes away before the answer is ready cancels it:
        // dropping the call cancels its requests and frees their cache.
        // The socket is looked up only for answers that take a while.
        std::optional<ConnectionWatch> watch;
        while (!call->wait(50)) {
          if (!watch) watch.emplace(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
          if (!watch->client_present()) {
            call.reset();
            res.status = 499;  // nginx's "client closed request": nobody reads it
            return;
          }
        }
        res.set_content(dump(call->whole()), "application/json");
        return;
      }
    } catch (const ApiError& e) {
      return send_error(res, e);
    }
    // Server-sent events as the output arrives. A failed write means the
    // client went away: the call is dropped, which cancels its requests
    // and frees their cache.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [call](size_t, httplib::DataSink& sink) {
          std::string events;
          const bool done = call->next_events(events, 200);
          if (!events.empty() && !sink.write(events.data(), events.size())) return false;
          if (done) sink.done();
          return true;
        },
        [call](bool) mutable { call.reset(); });
  }

  ServerOptions opt_;
  OpenAIProtocol protocol_;
  std::atomic<bool> draining_{false};
};

}  // namespace

int serve(sy_engine* engine, const ServerOptions& options) {
  Server s(engine, options);
  return s.run();
}

}  // namespace sy::server
