#include "server_metrics.h"

namespace sy::server {

void Histogram::observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (v <= bounds_[i]) ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::write(std::ostringstream& os, const std::string& name, const std::string& help, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  const std::string plain = labels.empty() ? "" : "{" + labels + "}";
  os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  for (size_t i = 0; i < bounds_.size(); ++i) os << name << "_bucket{" << labels << sep << "le=\"" << bounds_[i] << "\"} " << counts_[i] << "\n";
  os << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << count_ << "\n"
     << name << "_sum" << plain << " " << sum_ << "\n"
     << name << "_count" << plain << " " << count_ << "\n";
}

const char* finish_reason_name(int32_t r) {
  switch (r) {
    case SY_FINISH_STOP: return "stop";
    case SY_FINISH_LENGTH: return "length";
    case SY_FINISH_CONTEXT: return "length";
    case SY_FINISH_CANCELLED: return "abort";
    case SY_FINISH_TIMEOUT: return "abort";
    default: return "error";
  }
}

void ServerMetrics::record(const sy_request_info& info) {
  std::lock_guard<std::mutex> lock(mu_);
  ++success_[finish_reason_name(info.finish_reason)];
  prompt_tokens_.observe(info.prompt_tokens);
  generation_tokens_.observe(info.completion_tokens);
  if (info.completion_tokens <= 0) return;
  ttft_.observe(info.ttft_ms / 1000.0);
  e2e_.observe(info.e2e_ms / 1000.0);
  queue_.observe(info.queue_ms / 1000.0);
  prefill_.observe(std::max(0.0, info.ttft_ms - info.queue_ms) / 1000.0);
  decode_.observe(std::max(0.0, info.e2e_ms - info.ttft_ms) / 1000.0);
  if (info.completion_tokens > 1) tpot_.observe((info.e2e_ms - info.ttft_ms) / 1000.0 / (info.completion_tokens - 1));
}

void ServerMetrics::http_error() {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_errors_;
}

std::string ServerMetrics::prometheus(const sy_metrics& m) const {
  std::ostringstream os;
  const std::string label = "model_name=\"" + model_name_ + "\"";
  // Each engine figure under both names.
  auto both = [&](const char* type, const std::string& name, double v, const char* help) {
    os << "# HELP switchyard:" << name << " " << help << "\n# TYPE switchyard:" << name << " " << type << "\nswitchyard:" << name << " " << v << "\n";
    os << "# HELP vllm:" << name << " " << help << "\n# TYPE vllm:" << name << " " << type << "\nvllm:" << name << "{" << label << "} " << v << "\n";
  };
  auto gauge = [&](const char* name, double v, const char* help) { both("gauge", name, v, help); };
  auto counter = [&](const char* name, double v, const char* help) { both("counter", std::string(name) + "_total", v, help); };
  gauge("num_requests_running", m.running, "requests in the engine's running set");
  gauge("num_requests_waiting", m.waiting, "requests waiting for admission");
  const double usage = m.kv_blocks_total ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0;
  gauge("kv_cache_usage_perc", usage, "fraction of KV-cache blocks in use");
  gauge("gpu_cache_usage_perc", usage, "fraction of KV-cache blocks in use (vLLM's older name)");
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const char* prefix : {"switchyard", "vllm"}) {
    const std::string labels = std::string(prefix) == "vllm" ? label : "";
    const std::string sep = labels.empty() ? "" : ",";
    const std::string name = std::string(prefix) + ":request_success_total";
    os << "# HELP " << name << " finished requests by reason\n# TYPE " << name << " counter\n";
    for (const char* r : {"stop", "length", "abort", "error"})
      os << name << "{" << labels << sep << "finished_reason=\"" << r << "\"} " << (success_.count(r) ? success_.at(r) : 0) << "\n";
    const std::string p = std::string(prefix) + ":";
    ttft_.write(os, p + "time_to_first_token_seconds", "time to first token", labels);
    tpot_.write(os, p + "time_per_output_token_seconds", "time per output token after the first", labels);
    tpot_.write(os, p + "inter_token_latency_seconds", "time between output tokens", labels);
    e2e_.write(os, p + "e2e_request_latency_seconds", "end-to-end request latency", labels);
    queue_.write(os, p + "request_queue_time_seconds", "time waiting before the first step", labels);
    prefill_.write(os, p + "request_prefill_time_seconds", "time from the first step to the first token", labels);
    decode_.write(os, p + "request_decode_time_seconds", "time from the first token to the last", labels);
    prompt_tokens_.write(os, p + "request_prompt_tokens", "prompt tokens per request", labels);
    generation_tokens_.write(os, p + "request_generation_tokens", "generated tokens per request", labels);
  }
  os << "# HELP switchyard:http_errors_total HTTP requests answered with an error\n# TYPE switchyard:http_errors_total counter\n"
     << "switchyard:http_errors_total " << http_errors_ << "\n";
  return os.str();
}

}  // namespace sy::server
