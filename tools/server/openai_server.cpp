#include "openai_server.h"

#include "request_parsing.h"


#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace sy::server {
namespace {

using json = nlohmann::json;

std::atomic<bool> g_signal{false};
extern "C" void on_signal(int) { g_signal = true; }

// ---- errors shaped like OpenAI's

json error_body(const ApiError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e).dump(), "application/json");
}

// ---- Prometheus histograms (cumulative buckets, seconds)

struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i)
      if (v <= bounds[i]) ++counts[i];
    sum += v;
    ++count;
  }
  void write(std::ostringstream& os, const std::string& name, const std::string& help) const {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    for (size_t i = 0; i < bounds.size(); ++i) os << name << "_bucket{le=\"" << bounds[i] << "\"} " << counts[i] << "\n";
    os << name << "_bucket{le=\"+Inf\"} " << count << "\n" << name << "_sum " << sum << "\n" << name << "_count " << count << "\n";
  }
};

struct Stats {
  std::mutex mu;
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}};
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}};
  std::map<std::string, uint64_t> success;  // finished_reason -> count
  uint64_t http_errors = 0;
};

const char* reason_name(int32_t r) {
  switch (r) {
    case SY_FINISH_STOP: return "stop";
    case SY_FINISH_LENGTH: return "length";
    case SY_FINISH_CONTEXT: return "length";
    case SY_FINISH_CANCELLED: return "abort";
    case SY_FINISH_TIMEOUT: return "abort";
    default: return "error";
  }
}

// ---- one HTTP completion: n * prompts engine requests feeding one event queue

struct Logprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

struct Event {
  int index;
  std::string text;
  int32_t token = -1;  // the generated token (-1 on the final event)
  bool final = false;
  sy_request_info info{};
  std::string error;
  std::optional<Logprobs> logprobs;
};

struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  int pending = 0;  // choices not finished
  Stats* stats = nullptr;
};

struct Choice {
  std::shared_ptr<Completion> c;
  int index;
  std::optional<Logprobs> pending;  // on_logprobs comes just before its on_token
};

void on_logprobs(void* user, const sy_token_logprobs* lp) {
  auto* ch = static_cast<Choice*>(user);
  Logprobs l;
  l.logprob = lp->logprob;
  for (int32_t i = 0; i < lp->num_top; ++i) l.top.emplace_back(lp->top_tokens[i], lp->top_logprobs[i]);
  ch->pending = std::move(l);
}

void on_token(void* user, int32_t token, const char* text) {
  auto* ch = static_cast<Choice*>(user);
  {
    std::lock_guard<std::mutex> lock(ch->c->mu);
    ch->c->events.push_back({ch->index, text, token, false, {}, {}, std::move(ch->pending)});
    ch->pending.reset();
  }
  ch->c->cv.notify_all();
}

void on_finish(void* user, const sy_request_info* info) {
  auto* ch = static_cast<Choice*>(user);
  std::shared_ptr<Completion> c = ch->c;
  // Stats first: once the final event is queued, the HTTP handler may end the
  // request and a draining server may destroy the stats (found by TSan).
  {
    std::lock_guard<std::mutex> lock(c->stats->mu);
    ++c->stats->success[reason_name(info->finish_reason)];
    if (info->completion_tokens > 0) {
      c->stats->ttft.observe(info->ttft_ms / 1000.0);
      c->stats->e2e.observe(info->e2e_ms / 1000.0);
      if (info->completion_tokens > 1)
        c->stats->tpot.observe((info->e2e_ms - info->ttft_ms) / 1000.0 / (info->completion_tokens - 1));
    }
  }
  {
    std::lock_guard<std::mutex> lock(c->mu);
    Event e{ch->index, "", -1, true, *info, info->error ? info->error : "", std::nullopt};
    c->events.push_back(e);
    --c->pending;
  }
  c->cv.notify_all();
  delete ch;  // the last callback of this request
}

class Server {
 public:
  Server(sy_engine* e, const ServerOptions& o) : engine_(e), opt_(o) {
    if (opt_.model_name.empty()) opt_.model_name = sy_engine_model_name(e);
    if (opt_.max_prompt_tokens <= 0) opt_.max_prompt_tokens = sy_engine_max_context(e);
    // The model folder's recommended sampling, as the engine read it.
    const json d = json::parse(sy_engine_sampling_defaults(e));
    if (d.contains("temperature")) defaults_.default_temperature = d["temperature"].get<float>();
    if (d.contains("top_p")) defaults_.default_top_p = d["top_p"].get<float>();
    if (d.contains("top_k")) defaults_.default_top_k = d["top_k"].get<int>();
    if (d.contains("min_p")) defaults_.default_min_p = d["min_p"].get<float>();
    if (d.contains("repetition_penalty")) defaults_.default_repetition_penalty = d["repetition_penalty"].get<float>();
    if (d.contains("source")) std::fprintf(stderr, "switchyard serve: default sampling from %s\n", d["source"].get<std::string>().c_str());
    has_chat_template_ = *sy_engine_chat_template_name(e) != '\0';
    std::fprintf(stderr, "switchyard serve: chat template: %s\n",
                 has_chat_template_ ? sy_engine_chat_template_name(e) : "none (chat messages are joined as plain text)");
  }

  int run() {
    httplib::Server svr;
    int threads = opt_.http_threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(opt_.max_body_bytes);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (draining_ && req.path.rfind("/v1/", 0) == 0) {
        send_error(res, {503, "the server is shutting down", "server_error", "", "shutting_down"});
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!opt_.api_key.empty() && req.path.rfind("/v1/", 0) == 0 && req.get_header_value("Authorization") != "Bearer " + opt_.api_key) {
        send_error(res, {401, req.has_header("Authorization") ? "Incorrect API key provided" : "Missing API key: send 'Authorization: Bearer <key>'",
                         "invalid_request_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(stats_.mu);
        ++stats_.http_errors;
      }
      if (!res.body.empty()) return;
      if (res.status == 413) send_error(res, {413, "request body larger than " + std::to_string(opt_.max_body_bytes) + " bytes", "invalid_request_error", "", "body_too_large"});
      else if (res.status == 404) send_error(res, {404, "no such endpoint", "invalid_request_error", "", "not_found"});
      else send_error(res, {res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""});
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json j = {{"object", "list"},
                {"data", {{{"id", opt_.model_name}, {"object", "model"}, {"created", started_}, {"owned_by", "switchyard"},
                           {"max_model_len", sy_engine_max_context(engine_)}}}}};
      res.set_content(j.dump(), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::thread watcher([&] {
      while (!g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::fprintf(stderr, "switchyard serve: shutting down (finishing %d in-flight requests, at most %.0f s)\n", inflight_.load(),
                   opt_.shutdown_timeout_s);
      draining_ = true;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.shutdown_timeout_s);
      while (inflight_ > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      {
        std::lock_guard<std::mutex> lock(active_mu_);
        for (sy_request* r : active_) sy_request_cancel(r);
      }
      while (inflight_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      svr.stop();
    });
    if (!svr.bind_to_port(opt_.host, opt_.port)) {
      std::fprintf(stderr, "switchyard serve: error: cannot listen on %s:%d\n", opt_.host.c_str(), opt_.port);
      g_signal = true;
      watcher.join();
      return 1;
    }
    std::fprintf(stderr, "switchyard serve: %s on http://%s:%d (OpenAI API under /v1)\n", opt_.model_name.c_str(), opt_.host.c_str(), opt_.port);
    svr.listen_after_bind();
    g_signal = true;
    watcher.join();
    return 0;
  }

 private:
  RequestLimits limits() const {
    RequestLimits l = defaults_;
    l.model_name = opt_.model_name;
    l.max_tokens = opt_.max_tokens_limit;
    l.max_n = opt_.max_n;
    l.max_prompt_tokens = opt_.max_prompt_tokens;
    return l;
  }

  std::vector<int32_t> tokenize(const std::string& text, bool add_special) {
    if (!sy_engine_has_tokenizer(engine_)) throw bad_request("this model has no tokenizer: send token ids", "prompt");
    std::vector<int32_t> ids(text.size() + 8);
    int32_t n = 0;
    if (sy_tokenize(engine_, text.c_str(), add_special ? 1 : 0, ids.data(), static_cast<int32_t>(ids.size()), &n) != SY_API_OK)
      throw bad_request(sy_last_error(), "prompt");
    ids.resize(static_cast<size_t>(n));
    return ids;
  }

  // The conversation through the engine's chat template (sy_chat_render).
  std::string render_chat(const nlohmann::ordered_json& r) const {
    nlohmann::ordered_json req = nlohmann::ordered_json::object();
    for (const char* key : {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template_kwargs"})
      if (r.contains(key)) req[key] = r[key];
    const std::string body = req.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    std::string text(4096, '\0');
    int64_t n = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (sy_chat_render(engine_, body.c_str(), text.data(), static_cast<int64_t>(text.size()), &n) != SY_API_OK)
        throw bad_request(std::string("the chat template refused the messages: ") + sy_last_error(), "messages");
      if (n <= static_cast<int64_t>(text.size())) break;
      text.resize(static_cast<size_t>(n));  // the full length is known now
    }
    text.resize(static_cast<size_t>(n));
    return text;
  }

  // A token's text on its own, as the logprobs fields report it.
  std::string token_text(int32_t token) const {
    char buf[256];
    int32_t n = 0;
    if (sy_token_text(engine_, token, buf, sizeof buf, &n) != SY_API_OK) return "";
    if (n <= static_cast<int32_t>(sizeof buf)) return std::string(buf, static_cast<size_t>(n));
    std::string big(static_cast<size_t>(n), '\0');
    sy_token_text(engine_, token, big.data(), n, &n);
    return big;
  }
  static json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  }
  // OpenAI's chat shape: {"token", "logprob", "bytes", "top_logprobs": [...]}.
  json chat_logprob(int32_t token, const Logprobs& lp) const {
    json top = json::array();
    for (const auto& [t, v] : lp.top) {
      const std::string text = token_text(t);
      top.push_back({{"token", text}, {"logprob", v}, {"bytes", bytes_of(text)}});
    }
    const std::string text = token_text(token);
    return {{"token", text}, {"logprob", lp.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}};
  }
  // The completions shape: parallel lists.
  void add_completion_logprob(json& out, int32_t token, const Logprobs& lp, size_t& offset) const {
    const std::string text = token_text(token);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(lp.logprob);
    json top = json::object();
    for (const auto& [t, v] : lp.top) top[token_text(t)] = v;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += text.size();
  }
  static json empty_completion_logprobs() {
    return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    ParsedRequest parsed;
    try {
      RenderChat render;
      if (has_chat_template_) render = [this](const nlohmann::ordered_json& r) { return render_chat(r); };
      parsed = parse_request(
          req.body, chat, limits(), [this](const std::string& text, bool add_special) { return tokenize(text, add_special); }, render);
    } catch (const ApiError& e) {
      return send_error(res, e);
    }
    const Sampling& s = parsed.sampling;
    const auto& prompts = parsed.prompts;
    auto c = std::make_shared<Completion>();
    c->stats = &stats_;
    std::vector<sy_request*> reqs;
    std::vector<int> prompt_tokens;
    std::vector<const char*> stops;
    for (const auto& x : s.stop) stops.push_back(x.c_str());
    ++inflight_;
    const int limit = limits().max_tokens;
    for (size_t p = 0; p < prompts.size(); ++p)
      for (int j = 0; j < s.n; ++j) {
        sy_request_params params{};
        params.struct_size = sizeof(params);
        params.prompt_ids = prompts[p].data();
        params.num_prompt_ids = static_cast<int32_t>(prompts[p].size());
        params.max_tokens = max_tokens_for(s, prompts[p].size(), sy_engine_max_context(engine_), limit);
        params.sampling = {sizeof(sy_sampling), static_cast<float>(s.temperature), s.top_k, static_cast<float>(s.top_p),
                           s.seed >= 0 ? static_cast<uint64_t>(s.seed) + static_cast<uint64_t>(j) : next_seed_++};
        params.presence_penalty = static_cast<float>(s.presence_penalty);
        params.frequency_penalty = static_cast<float>(s.frequency_penalty);
        params.repetition_penalty = static_cast<float>(s.repetition_penalty);
        params.min_p = static_cast<float>(s.min_p);
        params.logprobs = s.logprobs ? 1 : 0;
        params.top_logprobs = s.top_logprobs;
        params.stop_ids = s.stop_token_ids.data();
        params.num_stop_ids = static_cast<int32_t>(s.stop_token_ids.size());
        params.on_logprobs = on_logprobs;
        params.ignore_eos = s.ignore_eos ? 1 : 0;
        params.stop = stops.data();
        params.num_stop = static_cast<int32_t>(stops.size());
        params.on_token = on_token;
        params.on_finish = on_finish;
        if (!s.constraint_kind.empty()) {
          params.constraint_kind = s.constraint_kind.c_str();
          params.constraint_spec = s.constraint_spec.c_str();
        }
        int index = static_cast<int>(p) * s.n + j;
        params.user = new Choice{c, index, std::nullopt};
        {
          std::lock_guard<std::mutex> lock(c->mu);
          ++c->pending;
        }
        sy_request* r = nullptr;
        if (const sy_api_status st = sy_submit(engine_, &params, &r); st != SY_API_OK) {
          std::string msg = sy_last_error();
          delete static_cast<Choice*>(params.user);
          {
            std::lock_guard<std::mutex> lock(c->mu);
            --c->pending;
          }
          release(reqs);
          --inflight_;
          // The request was fine but the engine cannot take it (a plugin it
          // depends on is out of service, no memory): 503, as for overload.
          if (st == SY_API_PLUGIN_FAILURE || st == SY_API_OUT_OF_MEMORY || st == SY_API_SHUTTING_DOWN)
            return send_error(res, {503, msg, "server_error", "", "service_unavailable"});
          // A constraint the logits processor refused names its field.
          const bool constraint = !s.constraint_kind.empty() && (msg.find("constraint") != std::string::npos ||
                                                                 msg.find("structured output") != std::string::npos);
          return send_error(res, bad_request(msg, constraint ? s.constraint_param : "prompt"));
        }
        reqs.push_back(r);
        prompt_tokens.push_back(static_cast<int>(prompts[p].size()));
        std::lock_guard<std::mutex> lock(active_mu_);
        active_.insert(r);
      }
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const int total_prompt = [&] {
      int t = 0;
      for (size_t p = 0; p < prompts.size(); ++p) t += static_cast<int>(prompts[p].size()) * s.n;
      return t;
    }();
    const bool token_ids = parsed.return_token_ids;
    std::vector<std::vector<int32_t>> choice_prompts;
    for (size_t p = 0; p < prompts.size(); ++p)
      for (int j = 0; j < s.n; ++j) choice_prompts.push_back(prompts[p]);
    if (!s.stream) {
      std::vector<std::string> texts(reqs.size());
      std::vector<std::string> finish(reqs.size());
      std::vector<std::vector<int32_t>> ids(reqs.size());
      std::vector<std::vector<Logprobs>> lps(reqs.size());
      int completion_tokens = 0, cached_tokens = 0;
      std::string error;
      {
        std::unique_lock<std::mutex> lock(c->mu);
        c->cv.wait(lock, [&] { return c->pending == 0; });
        for (const Event& e : c->events) {
          if (!e.final) {
            ids[static_cast<size_t>(e.index)].push_back(e.token);
            if (e.logprobs) lps[static_cast<size_t>(e.index)].push_back(*e.logprobs);
            continue;
          }
          finish[static_cast<size_t>(e.index)] = reason_name(e.info.finish_reason);
          completion_tokens += e.info.completion_tokens;
          cached_tokens += e.info.cached_tokens;
          if (e.info.finish_reason == SY_FINISH_ERROR) error = e.error;
        }
      }
      for (size_t i = 0; i < reqs.size(); ++i) texts[i] = sy_request_text(reqs[i]);
      release(reqs);
      --inflight_;
      if (!error.empty()) return send_error(res, {500, error, "server_error", "", ""});
      json choices = json::array();
      for (size_t i = 0; i < reqs.size(); ++i) {
        json logprobs = nullptr;
        if (s.logprobs) {
          const size_t n = std::min(ids[i].size(), lps[i].size());
          if (chat) {
            logprobs = {{"content", json::array()}};
            for (size_t k = 0; k < n; ++k) logprobs["content"].push_back(chat_logprob(ids[i][k], lps[i][k]));
          } else {
            logprobs = empty_completion_logprobs();
            size_t offset = 0;
            for (size_t k = 0; k < n; ++k) add_completion_logprob(logprobs, ids[i][k], lps[i][k], offset);
          }
        }
        if (chat)
          choices.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", texts[i]}}}, {"finish_reason", finish[i]}, {"logprobs", logprobs}});
        else
          choices.push_back({{"index", i}, {"text", texts[i]}, {"finish_reason", finish[i]}, {"logprobs", logprobs}});
        if (token_ids) {
          choices.back()["prompt_token_ids"] = choice_prompts[i];
          choices.back()["token_ids"] = ids[i];
        }
      }
      json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created}, {"model", opt_.model_name},
                  {"choices", choices},
                  {"usage", {{"prompt_tokens", total_prompt}, {"completion_tokens", completion_tokens}, {"total_tokens", total_prompt + completion_tokens},
                             {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    // Streaming: server-sent events, one chunk per piece of text, then the
    // finish reason per choice, usage, and [DONE]. A failed write means the
    // client went away: its requests are cancelled and their cache freed.
    auto shared_reqs = std::make_shared<std::vector<sy_request*>>(reqs);
    auto sent_role = std::make_shared<std::vector<bool>>(reqs.size(), false);
    auto completion_tokens = std::make_shared<int>(0);
    auto cached_tokens = std::make_shared<int>(0);
    auto text_offsets = std::make_shared<std::vector<size_t>>(reqs.size(), 0);
    const bool want_logprobs = s.logprobs;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, c, shared_reqs, sent_role, completion_tokens, cached_tokens, text_offsets, want_logprobs, chat, id, created, total_prompt,
         token_ids](size_t, httplib::DataSink& sink) {
          std::deque<Event> batch;
          bool all_done;
          {
            std::unique_lock<std::mutex> lock(c->mu);
            c->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !c->events.empty() || c->pending == 0; });
            batch.swap(c->events);
            all_done = c->pending == 0 && c->events.empty();
          }
          auto chunk = [&](int index, const json& payload_choice) {
            json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                      {"model", opt_.model_name}, {"choices", json::array({payload_choice})}};
            std::string line = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
            (void)index;
            return sink.write(line.data(), line.size());
          };
          bool ok = true;
          for (const Event& e : batch) {
            if (!ok) break;
            auto idx = static_cast<size_t>(e.index);
            if (chat && !(*sent_role)[idx]) {
              ok = chunk(e.index, {{"index", e.index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
              (*sent_role)[idx] = true;
            }
            if (!ok) break;
            if (!e.final) {
              if (e.text.empty() && !token_ids && !e.logprobs) continue;  // a token with no text of its own yet
              json piece = chat ? json{{"index", e.index}, {"delta", {{"content", e.text}}}, {"finish_reason", nullptr}}
                                : json{{"index", e.index}, {"text", e.text}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
              if (token_ids) piece["token_ids"] = json::array({e.token});
              if (want_logprobs && e.logprobs) {
                if (chat) {
                  piece["logprobs"] = {{"content", json::array({chat_logprob(e.token, *e.logprobs)})}};
                } else {
                  json lp = empty_completion_logprobs();
                  add_completion_logprob(lp, e.token, *e.logprobs, (*text_offsets)[idx]);
                  piece["logprobs"] = lp;
                }
              }
              ok = chunk(e.index, piece);
            } else {
              *completion_tokens += e.info.completion_tokens;
              *cached_tokens += e.info.cached_tokens;
              std::string reason = reason_name(e.info.finish_reason);
              ok = chat ? chunk(e.index, {{"index", e.index}, {"delta", json::object()}, {"finish_reason", reason}})
                        : chunk(e.index, {{"index", e.index}, {"text", ""}, {"finish_reason", reason}, {"logprobs", nullptr}});
              if (ok && e.info.finish_reason == SY_FINISH_ERROR) {
                // The status line went out with the first byte: the error
                // travels as an event (as vLLM streams it), with its message.
                json err = error_body({500, e.error, "server_error", "", ""});
                std::string line = "data: " + err.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
                ok = sink.write(line.data(), line.size());
              }
            }
          }
          if (!ok) return false;  // client gone: the resource releaser cancels
          if (all_done) {
            json usage = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                          {"model", opt_.model_name}, {"choices", json::array()},
                          {"usage", {{"prompt_tokens", total_prompt}, {"completion_tokens", *completion_tokens},
                                     {"total_tokens", total_prompt + *completion_tokens},
                                     {"prompt_tokens_details", {{"cached_tokens", *cached_tokens}}}}}};
            std::string tail = "data: " + usage.dump() + "\n\ndata: [DONE]\n\n";
            if (!sink.write(tail.data(), tail.size())) return false;
            sink.done();
          }
          return true;
        },
        [this, shared_reqs](bool) {
          // Runs when the response ends, finished or not.
          release(*shared_reqs);
          --inflight_;
        });
  }

  void release(const std::vector<sy_request*>& reqs) {
    std::lock_guard<std::mutex> lock(active_mu_);
    for (sy_request* r : reqs) {
      active_.erase(r);
      sy_request_release(r);  // cancels it if it is still running
    }
  }

  std::string metrics() {
    sy_metrics m{};
    m.struct_size = sizeof(m);
    sy_engine_metrics(engine_, &m);
    std::ostringstream os;
    auto gauge = [&](const char* name, double v, const char* help) {
      os << "# HELP switchyard:" << name << " " << help << "\n# TYPE switchyard:" << name << " gauge\nswitchyard:" << name << " " << v << "\n";
    };
    auto counter = [&](const char* name, double v, const char* help) {
      os << "# HELP switchyard:" << name << "_total " << help << "\n# TYPE switchyard:" << name << "_total counter\nswitchyard:" << name
         << "_total " << v << "\n";
    };
    gauge("num_requests_running", m.running, "requests in the engine's running set");
    gauge("num_requests_waiting", m.waiting, "requests waiting for admission");
    gauge("kv_cache_usage_perc", m.kv_blocks_total ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0,
          "fraction of KV-cache blocks in use");
    counter("prompt_tokens", static_cast<double>(m.prompt_tokens), "prompt tokens processed");
    counter("generation_tokens", static_cast<double>(m.generated_tokens), "tokens generated");
    counter("num_preemptions", static_cast<double>(m.preemptions), "sequences preempted (recomputed later)");
    counter("prefix_cache_queries", static_cast<double>(m.prompt_tokens), "prompt tokens looked up in the prefix cache");
    counter("prefix_cache_hits", static_cast<double>(m.cached_tokens), "prompt tokens found in the prefix cache");
    counter("spec_decode_num_drafts", static_cast<double>(m.spec_drafts), "speculative verification steps");
    counter("spec_decode_num_draft_tokens", static_cast<double>(m.spec_draft_tokens), "draft tokens proposed");
    counter("spec_decode_num_accepted_tokens", static_cast<double>(m.spec_accepted_tokens), "draft tokens accepted");
    counter("structured_output_requests", static_cast<double>(m.constrained_requests), "requests with a response_format, regex or grammar");
    counter("structured_output_refusals", static_cast<double>(m.constraint_refusals), "constraints the logits processor refused");
    counter("structured_output_compile_seconds", m.constraint_compile_ms / 1000, "time compiling (or finding cached) grammars");
    counter("structured_output_mask_seconds", m.constraint_mask_ms / 1000, "time filling token masks");
    counter("structured_output_masks", static_cast<double>(m.constraint_mask_rows), "token masks filled");
    std::lock_guard<std::mutex> lock(stats_.mu);
    os << "# HELP switchyard:request_success_total finished requests by reason\n# TYPE switchyard:request_success_total counter\n";
    for (const char* r : {"stop", "length", "abort", "error"})
      os << "switchyard:request_success_total{finished_reason=\"" << r << "\"} " << (stats_.success.count(r) ? stats_.success.at(r) : 0) << "\n";
    stats_.ttft.write(os, "switchyard:time_to_first_token_seconds", "time to first token");
    stats_.tpot.write(os, "switchyard:time_per_output_token_seconds", "time per output token after the first");
    stats_.e2e.write(os, "switchyard:e2e_request_latency_seconds", "end-to-end request latency");
    return os.str();
  }

  sy_engine* engine_;
  ServerOptions opt_;
  Stats stats_;
  std::atomic<bool> draining_{false};
  std::atomic<int> inflight_{0};
  std::atomic<uint64_t> next_id_{1}, next_seed_{1000};
  std::mutex active_mu_;
  std::set<sy_request*> active_;
  int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  bool has_chat_template_ = false;
  RequestLimits defaults_;  // the model's default sampling
};

}  // namespace

int serve(sy_engine* engine, const ServerOptions& options) {
  Server s(engine, options);
  return s.run();
}

}  // namespace sy::server
