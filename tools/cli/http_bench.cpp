#include "http_bench.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace sy::cli {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// One streaming completion; token times from the SSE events.
GenerationResult stream_one(const std::string& url, const std::string& key, const std::string& model, const GenerationRequest& r,
                            Clock::time_point sent) {
  GenerationResult g;
  httplib::Client cli(url);
  cli.set_read_timeout(600, 0);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  nlohmann::json body = {{"model", model}, {"prompt", r.prompt}, {"max_tokens", r.max_tokens},
                         {"temperature", r.sampling.temperature}, {"stream", true}};
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
      const auto& c = j["choices"][0];
      double now = ms_between(sent, Clock::now());
      if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
        if (g.token_ms.empty()) g.ttft_ms = now;
        g.token_ms.push_back(now);
        g.tokens.push_back(0);  // text pieces: one per streamed event
        g.e2e_ms = now;
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) g.finish_reason = finish_reason_from_name(c["finish_reason"].get<std::string>());
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err) || res.status != 200) {
    g.finish_reason = FinishReason::Error;
    g.error = err != httplib::Error::Success ? "connection failed: " + httplib::to_string(err) : "HTTP " + std::to_string(res.status);
  }
  return g;
}

}  // namespace

BenchResult run_workload_http(const std::string& url, const std::string& api_key, const std::string& model, const Workload& w,
                              bool progress) {
  BenchResult r;
  r.profile = url;
  const size_t n = w.requests.size();
  r.results.resize(n);
  r.arrival_s.assign(n, 0);
  std::atomic<size_t> done{0};
  std::mutex finished_mu;
  std::condition_variable finished_cv;  // a request finished (for max_concurrency)
  auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.requests[i].arrival_s)));
    if (w.max_concurrency > 0) {
      std::unique_lock<std::mutex> lock(finished_mu);
      finished_cv.wait(lock, [&] { return i - done < static_cast<size_t>(w.max_concurrency); });
    }
    r.arrival_s[i] = std::chrono::duration<double>(Clock::now() - t0).count();
    clients.emplace_back([&, i] {
      r.results[i] = stream_one(url, api_key, model, w.requests[i].request, Clock::now());
      {
        std::lock_guard<std::mutex> lock(finished_mu);
        ++done;
      }
      finished_cv.notify_all();
    });
    if (progress) std::fprintf(stderr, "\r  %zu/%zu sent, %zu done", i + 1, n, done.load());
  }
  for (auto& t : clients) t.join();
  if (progress) std::fprintf(stderr, "\n");
  r.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  compute_serving_metrics(r, w);
  return r;
}

}  // namespace sy::cli
