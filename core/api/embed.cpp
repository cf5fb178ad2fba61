// The C embedding API (sdk/include/switchyard/switchyard.h): a thin layer
// over the C++ facade (facade/engine.h) and the model folder it opened,
// adding what C needs: status codes and sy_last_error instead of
// exceptions (none crosses into C), versioned structs, and per request the
// streamed text with stop strings.
#include "switchyard/switchyard.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <dlfcn.h>
#include <filesystem>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/api_internal.h"

namespace sy::api {

namespace {
thread_local std::string t_error;
}

sy_api_status fail(sy_api_status code, const std::string& message) {
  t_error = message;
  return code;
}

sy_api_status status_for(sy::ErrorKind kind) {
  switch (kind) {
    case sy::ErrorKind::InvalidArgument: return SY_API_INVALID_ARGUMENT;
    case sy::ErrorKind::NotFound: return SY_API_NOT_FOUND;
    case sy::ErrorKind::Unsupported: return SY_API_UNSUPPORTED;
    case sy::ErrorKind::OutOfMemory: return SY_API_OUT_OF_MEMORY;
    case sy::ErrorKind::PluginFailure: return SY_API_PLUGIN_FAILURE;
    case sy::ErrorKind::Cancelled: return SY_API_CANCELLED;
  }
  return SY_API_ERROR;
}

const char* last_error() { return t_error.c_str(); }

}  // namespace sy::api

using namespace sy::api;

namespace {

int32_t finish_code(sy::FinishReason reason) {
  switch (reason) {
    case sy::FinishReason::Stop: return SY_FINISH_STOP;
    case sy::FinishReason::Length: return SY_FINISH_LENGTH;
    case sy::FinishReason::Context: return SY_FINISH_CONTEXT;
    case sy::FinishReason::Cancelled: return SY_FINISH_CANCELLED;
    case sy::FinishReason::Timeout: return SY_FINISH_TIMEOUT;
    case sy::FinishReason::None: return SY_FINISH_NONE;
    case sy::FinishReason::Error: break;
  }
  return SY_FINISH_ERROR;
}

// Bytes at the end of s that start an incomplete UTF-8 character.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Per-request state shared by the handle and the engine's callbacks.
struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  sy::Engine* engine = nullptr;
  std::unique_ptr<sy::StreamDecoder> decoder;  // null without a tokenizer
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  size_t polled = 0;
  std::string text;     // delivered text
  std::string held;     // decoded, not yet delivered (maybe the start of a stop string)
  std::vector<std::string> stops;
  bool stopped = false;  // a stop string was found: the rest is discarded
  bool finished = false;
  sy_request_info info{};
  std::string error;
  std::string final_text;  // info.final_text
  void (*on_token)(void*, int32_t, const char*) = nullptr;
  void (*on_finish)(void*, const sy_request_info*) = nullptr;
  void* user = nullptr;

  // Moves what can no longer be part of a stop string from held to text;
  // returns it. Called with mu held.
  std::string release_text(bool flush) {
    if (stopped) return {};
    size_t cut = std::string::npos;
    for (const auto& s : stops) {
      size_t at = held.find(s);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    std::string out;
    if (cut != std::string::npos) {
      out = held.substr(0, cut);
      held.clear();
      stopped = true;
    } else if (flush) {
      out.swap(held);
    } else {
      // Keep the longest suffix that could still grow into a stop string,
      // and an incomplete UTF-8 character.
      size_t keep = incomplete_utf8_tail(held);
      for (const auto& s : stops)
        for (size_t k = std::min(s.size() - 1, held.size()); k > keep; --k)
          if (held.compare(held.size() - k, k, s, 0, k) == 0) {
            keep = k;
            break;
          }
      out = held.substr(0, held.size() - keep);
      held.erase(0, held.size() - keep);
    }
    text += out;
    return out;
  }
};

}  // namespace

struct sy_request {
  std::shared_ptr<RequestState> state;
  std::string snapshot;  // what sy_request_text last returned
};

namespace {

sy_api_status chat_render(const sy_tokenizer* tk, const char* fn, const char* request_json, char* text, int64_t capacity,
                          int64_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!tk || !request_json || !length || capacity < 0 || (capacity > 0 && !text))
      return fail(SY_API_INVALID_ARGUMENT, std::string(fn) + ": engine, request_json, length (and text when capacity > 0) are required");
    nlohmann::ordered_json r;
    try {
      r = nlohmann::ordered_json::parse(request_json);  // ordered: templates see keys as written
    } catch (const std::exception& e) {
      return fail(SY_API_INVALID_ARGUMENT, std::string(fn) + ": request_json" + std::string(" is not JSON: ") + e.what());
    }
    if (!r.is_object() || !r.contains("messages") || !r["messages"].is_array())
      return fail(SY_API_INVALID_ARGUMENT, std::string(fn) + ": request_json must be an object with a 'messages' list");
    // A key the renderer would not use is refused, not dropped (a caller
    // expecting it to change the prompt would get a silently different one).
    static const char* const known[] = {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
                                        "chat_template_kwargs", "chat_template"};
    for (const auto& item : r.items()) {
      const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one in a lambda
      if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return key == k; }))
        return fail(SY_API_INVALID_ARGUMENT, std::string(fn) + ": unknown key '" + key +
                                                 "' (known: messages, tools, documents, add_generation_prompt, "
                                                 "continue_final_message, chat_template_kwargs, chat_template)");
    }
    // 1.6: a template given with the request (vLLM's chat_template field),
    // rendered with the model's special tokens.
    std::optional<sy::ChatTemplate> own;
    if (r.contains("chat_template") && !r["chat_template"].is_null()) {
      SY_CHECK(r["chat_template"].is_string(), fn << ": 'chat_template' must be the template's source text");
      own = sy::ChatTemplate::from_source(r["chat_template"].get<std::string>(), "the request's chat_template",
                                          tk->chat_template ? tk->chat_template->special_tokens() : nlohmann::ordered_json::object());
    }
    const sy::ChatTemplate* tmpl = own ? &*own : tk->chat_template ? &*tk->chat_template : nullptr;
    if (!tmpl) return fail(SY_API_UNSUPPORTED, std::string(fn) + ": " + tk->where + " has no chat template");
    sy::ChatRequest cr;
    cr.messages = r["messages"];
    if (r.contains("tools")) cr.tools = r["tools"];
    if (r.contains("documents")) cr.documents = r["documents"];
    auto flag = [&](const char* key, bool fallback) {
      if (!r.contains(key) || r[key].is_null()) return fallback;
      SY_CHECK(r[key].is_boolean(), fn << ": '" << key << "' must be true or false");
      return r[key].get<bool>();
    };
    cr.add_generation_prompt = flag("add_generation_prompt", true);
    cr.continue_final_message = flag("continue_final_message", false);
    if (r.contains("chat_template_kwargs") && !r["chat_template_kwargs"].is_null()) {
      SY_CHECK(r["chat_template_kwargs"].is_object(), fn << ": 'chat_template_kwargs' must be an object");
      cr.extra = r["chat_template_kwargs"];
    }
    const std::string out = tmpl->apply(cr);
    *length = static_cast<int64_t>(out.size());
    if (capacity > 0) std::memcpy(text, out.data(), static_cast<size_t>(std::min<int64_t>(capacity, *length)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}
}  // namespace

extern "C" {

const char* sy_last_error(void) { return sy::api::last_error(); }

sy_api_status sy_engine_create(const sy_engine_options* options_in, sy_engine** out) {
  return guarded([&]() -> sy_api_status {
    if (!out) return fail(SY_API_INVALID_ARGUMENT, "sy_engine_create: out is required");
    sy_engine_options o = read_struct(options_in, SY_SIZE_THROUGH(sy_engine_options, threads), "sy_engine_create: options");
    std::string manifest = o.manifest ? o.manifest : "";
    if (manifest.empty()) {
      // 1.5: the default manifest serves any model, which must then be named.
      if (!o.model) return fail(SY_API_INVALID_ARGUMENT, "sy_engine_create: options.manifest or options.model is required");
      manifest = sy_default_manifest();
      if (manifest.empty())
        return fail(SY_API_NOT_FOUND, "sy_engine_create: no options.manifest, and no default manifest is installed beside the "
                                      "library (share/switchyard/default.yaml)");
    }
    sy::EngineOptions eo;
    eo.manifest = manifest;
    eo.profile = o.profile ? o.profile : "";
    eo.model = o.model ? o.model : "";
    eo.threads = o.threads;
    eo.tokenizer = o.tokenizer ? o.tokenizer : "";
    eo.chat_template = o.chat_template ? o.chat_template : "";
    eo.tool_parser = o.tool_parser ? o.tool_parser : "";
    auto e = std::make_unique<sy_engine>();
    e->engine = sy::Engine::open(eo);
    if (!e->engine->has_step_engine())
      return fail(SY_API_INVALID_ARGUMENT, manifest + ": the embedding API serves requests with the step engine: the profile must "
                                                      "select a cache manager ('cache:') and the attention-fusion pass");
    const sy::ModelFolder& folder = e->engine->folder();
    if (!folder.tokenizer_file().empty()) e->tok.tokenizer = folder.tokenizer();
    e->tok.path = folder.tokenizer_file();
    e->tok.where = folder.model_file();
    e->tok.chat_template = folder.chat_template();
    const sy::SamplingDefaults d = folder.sampling_defaults();
    nlohmann::ordered_json defaults = nlohmann::ordered_json::object();
    // The decimal the file wrote (0.6, not the float's 0.6000000238...).
    auto decimal = [](float f) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(f));  // 7 digits round-trip a float
      return std::strtod(buf, nullptr);
    };
    if (d.temperature) defaults["temperature"] = decimal(*d.temperature);
    if (d.top_p) defaults["top_p"] = decimal(*d.top_p);
    if (d.top_k) defaults["top_k"] = *d.top_k;
    if (d.min_p) defaults["min_p"] = decimal(*d.min_p);
    if (d.repetition_penalty) defaults["repetition_penalty"] = decimal(*d.repetition_penalty);
    if (!d.empty()) defaults["source"] = d.source;
    e->sampling_defaults = defaults.dump();
    e->model_name = folder.name();
    if (e->tok.tokenizer)
      e->tokenizer_info = describe_tokenizer(*e->engine, *e->tok.tokenizer, e->tok.chat_template ? &*e->tok.chat_template : nullptr);
    set_up_output_parsing(*e);
    *out = e.release();
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

void sy_engine_destroy(sy_engine* engine) {
  try {
    delete engine;  // the step engine cancels what is left and joins its thread
  } catch (...) {
  }
}

const char* sy_engine_model_name(const sy_engine* engine) { return engine ? engine->model_name.c_str() : ""; }
int32_t sy_engine_max_context(const sy_engine* engine) {
  return engine ? static_cast<int32_t>(engine->engine->max_context()) : 0;
}
int32_t sy_engine_has_tokenizer(const sy_engine* engine) { return engine && engine->tok.tokenizer ? 1 : 0; }
const char* sy_engine_model_path(const sy_engine* engine) { return engine ? engine->engine->folder().model_file().c_str() : ""; }
const char* sy_engine_chat_template_name(const sy_engine* engine) {
  return engine && engine->tok.chat_template ? engine->tok.chat_template->name().c_str() : "";
}
const char* sy_engine_sampling_defaults(const sy_engine* engine) { return engine ? engine->sampling_defaults.c_str() : "{}"; }

sy_api_status sy_chat_render(const sy_engine* engine, const char* request_json, char* text, int64_t capacity, int64_t* length) {
  return chat_render(engine ? &engine->tok : nullptr, "sy_chat_render", request_json, text, capacity, length);
}
const char* sy_engine_tokenizer_path(const sy_engine* engine) { return engine ? engine->tok.path.c_str() : ""; }

sy_api_status sy_token_text(const sy_engine* engine, int32_t token, char* text, int32_t capacity, int32_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !length || (capacity > 0 && !text)) return fail(SY_API_INVALID_ARGUMENT, "sy_token_text: engine and length are required");
    if (!engine->tok.tokenizer) return fail(SY_API_NOT_FOUND, "the manifest names no tokenizer and none is beside the model");
    if (token < 0 || token >= engine->tok.tokenizer->vocab_size())
      return fail(SY_API_INVALID_ARGUMENT, "token " + std::to_string(token) + " is outside the tokenizer's vocabulary");
    const std::string piece = engine->tok.tokenizer->decode({token}, false);
    *length = static_cast<int32_t>(piece.size());
    if (capacity > 0) std::memcpy(text, piece.data(), std::min<size_t>(piece.size(), static_cast<size_t>(capacity)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_tokenize(const sy_engine* engine, const char* text, int32_t add_bos, int32_t* ids, int32_t capacity,
                          int32_t* count) {
  if (engine && !engine->tok.tokenizer) return fail(SY_API_NOT_FOUND, "the manifest names no tokenizer and none is beside the model");
  return sy_tokenizer_encode(engine ? &engine->tok : nullptr, text, add_bos, ids, capacity, count);
}

sy_api_status sy_submit(sy_engine* engine, const sy_request_params* params_in, sy_request** out) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !out) return fail(SY_API_INVALID_ARGUMENT, "sy_submit: engine and out are required");
    const sy_request_params params = read_struct(params_in, SY_SIZE_THROUGH(sy_request_params, user), "sy_submit: params");
    const sy_request_params* p = &params;
    sy::GenerationRequest req;
    if (p->prompt_text) {
      if (!engine->tok.tokenizer) return fail(SY_API_INVALID_ARGUMENT, "prompt_text needs a tokenizer; give prompt_ids");
      if (!*p->prompt_text) return fail(SY_API_INVALID_ARGUMENT, "the prompt is empty");
      req.prompt = engine->tok.tokenizer->encode(p->prompt_text, true);
    } else {
      if (!p->prompt_ids || p->num_prompt_ids <= 0) return fail(SY_API_INVALID_ARGUMENT, "the prompt is empty");
      req.prompt.assign(p->prompt_ids, p->prompt_ids + p->num_prompt_ids);
    }
    if (p->max_tokens < 0) return fail(SY_API_INVALID_ARGUMENT, "max_tokens must be >= 0");
    req.max_tokens = p->max_tokens == 0 ? 16 : p->max_tokens;
    req.stop_at_eos = p->ignore_eos == 0;
    req.priority = p->priority;
    req.timeout_ms = p->timeout_ms;
    // The growable sampling struct when given, else the frozen 1.0 one and
    // the 1.1 fields (zero when the caller's struct predates them).
    sy_sampling_params sp{};
    if (p->sampling_params) {
      // Two sources for one setting would silently drop one: refuse it.
      const char* both = p->sampling.temperature != 0.f ? "sampling.temperature"
                         : p->sampling.top_k != 0       ? "sampling.top_k"
                         : p->sampling.top_p != 0.f     ? "sampling.top_p"
                         : p->sampling.seed != 0        ? "sampling.seed"
                         : p->presence_penalty != 0.f   ? "presence_penalty"
                         : p->frequency_penalty != 0.f  ? "frequency_penalty"
                         : p->repetition_penalty != 0.f ? "repetition_penalty"
                         : p->min_p != 0.f              ? "min_p"
                                                        : nullptr;
      if (both)
        return fail(SY_API_INVALID_ARGUMENT, std::string("sy_submit: params.") + both +
                                                 " is set together with params.sampling_params, which replaces it: set one");
      sp = read_struct(p->sampling_params, SY_SIZE_THROUGH(sy_sampling_params, seed), "sy_submit: params.sampling_params");
    } else {
      sp.temperature = p->sampling.temperature;
      sp.top_k = p->sampling.top_k;
      sp.top_p = p->sampling.top_p;
      sp.seed = p->sampling.seed;
      sp.presence_penalty = p->presence_penalty;
      sp.frequency_penalty = p->frequency_penalty;
      sp.repetition_penalty = p->repetition_penalty;
      sp.min_p = p->min_p;
    }
    req.sampling.temperature = sp.temperature;
    req.sampling.top_k = sp.top_k;
    req.sampling.top_p = sp.top_p == 0.f ? 1.f : sp.top_p;
    req.sampling.seed = sp.seed;
    req.sampling.presence_penalty = sp.presence_penalty;
    req.sampling.frequency_penalty = sp.frequency_penalty;
    req.sampling.repetition_penalty = sp.repetition_penalty == 0.f ? 1.f : sp.repetition_penalty;
    req.sampling.min_p = sp.min_p;
    if (sp.num_logit_bias < 0 || (sp.num_logit_bias > 0 && (!sp.logit_bias_ids || !sp.logit_bias_values)))
      return fail(SY_API_INVALID_ARGUMENT, "sy_submit: sampling_params.num_logit_bias needs logit_bias_ids and logit_bias_values");
    for (int32_t i = 0; i < sp.num_logit_bias; ++i) req.sampling.logit_bias.emplace_back(sp.logit_bias_ids[i], sp.logit_bias_values[i]);
    if (p->logprobs) req.sampling.logprobs = p->top_logprobs;
    if (p->num_stop_ids > 0 && !p->stop_ids) return fail(SY_API_INVALID_ARGUMENT, "num_stop_ids without stop_ids");
    for (int32_t i = 0; i < p->num_stop_ids; ++i) req.stop_ids.push_back(p->stop_ids[i]);
    if (p->constraint_kind && *p->constraint_kind) {
      req.constraint.kind = p->constraint_kind;
      req.constraint.spec = p->constraint_spec ? p->constraint_spec : "";
    } else if (p->constraint_spec && *p->constraint_spec) {
      return fail(SY_API_INVALID_ARGUMENT, "sy_submit: params.constraint_spec without params.constraint_kind");
    }
    auto* on_logprobs = p->on_logprobs;
    auto st = std::make_shared<RequestState>();
    st->engine = engine->engine.get();
    // Streamed text leaves special tokens out (end-of-sequence among them).
    if (engine->tok.tokenizer) st->decoder = std::make_unique<sy::StreamDecoder>(*engine->tok.tokenizer, req.prompt, true);
    for (int32_t i = 0; i < p->num_stop; ++i)
      if (p->stop && p->stop[i] && *p->stop[i]) st->stops.emplace_back(p->stop[i]);
    st->on_token = p->on_token;
    st->on_finish = p->on_finish;
    st->user = p->user;
    st->info.struct_size = sizeof(sy_request_info);
    st->info.final_text = "";
    st->info.prompt_tokens = static_cast<int32_t>(req.prompt.size());
    sy::RequestCallbacks cb;
    cb.on_token = [st](uint64_t, int tok) {
      std::string piece;
      bool stop_now = false;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (st->stopped) return;  // tokens after a stop string are dropped
        st->tokens.push_back(tok);
        if (st->decoder) {
          st->held += st->decoder->push(tok);
          piece = st->release_text(false);
          stop_now = st->stopped;
        }
      }
      st->cv.notify_all();
      if (st->on_token) st->on_token(st->user, tok, piece.c_str());
      if (stop_now) st->engine->cancel(st->id);
    };
    if (on_logprobs) {
      cb.on_logprobs = [st, on_logprobs](uint64_t, const sy::TokenLogprobs& lp) {
        {
          std::lock_guard<std::mutex> lock(st->mu);
          if (st->stopped) return;
        }
        std::vector<int32_t> ids;
        std::vector<float> values;
        for (const auto& [t, v] : lp.top) {
          ids.push_back(t);
          values.push_back(v);
        }
        sy_token_logprobs event{sizeof(sy_token_logprobs), lp.token, lp.logprob, static_cast<int32_t>(ids.size()), ids.data(), values.data()};
        on_logprobs(st->user, &event);
      };
    }
    cb.on_finish = [st](uint64_t, const sy::GenerationResult& r) {
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (st->decoder && !st->stopped) st->held += st->decoder->flush();
        // What only the end releases: streaming callers get it in info.final_text.
        st->final_text = st->release_text(true);
        st->info.final_text = st->final_text.c_str();
        st->info.finish_reason = st->stopped ? SY_FINISH_STOP : finish_code(r.finish_reason);
        st->info.completion_tokens = static_cast<int32_t>(st->tokens.size());
        st->info.cached_tokens = r.cached_tokens;
        st->info.ttft_ms = r.ttft_ms;
        st->info.queue_ms = r.queue_ms;
        st->info.e2e_ms = r.e2e_ms;
        st->error = r.error;
        st->info.error = st->error.c_str();
        st->finished = true;
      }
      st->cv.notify_all();
      if (st->on_finish) st->on_finish(st->user, &st->info);
    };
    {
      // Hold the lock so the callbacks see the id before they can run.
      std::lock_guard<std::mutex> lock(st->mu);
      st->id = st->engine->submit(req, cb);
    }
    *out = new sy_request{st, {}};
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

int32_t sy_request_poll(sy_request* r, int32_t* tokens, int32_t capacity, int32_t* count) {
  if (!r) return 1;
  std::lock_guard<std::mutex> lock(r->state->mu);
  auto& st = *r->state;
  int32_t n = 0;
  while (st.polled < st.tokens.size() && n < capacity) tokens[n++] = st.tokens[st.polled++];
  if (count) *count = n;
  return st.finished && st.polled == st.tokens.size() ? 1 : 0;
}

void sy_request_wait(sy_request* r) {
  if (!r) return;
  std::unique_lock<std::mutex> lock(r->state->mu);
  r->state->cv.wait(lock, [&] { return r->state->finished; });
}

void sy_request_cancel(sy_request* r) {
  if (r) r->state->engine->cancel(r->state->id);
}

sy_api_status sy_request_copy_text(sy_request* r, char* text, int32_t capacity, int32_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!r || !length || capacity < 0 || (capacity > 0 && !text))
      return fail(SY_API_INVALID_ARGUMENT, "sy_request_copy_text: request and length are required (text with capacity > 0)");
    std::lock_guard<std::mutex> lock(r->state->mu);
    const std::string& t = r->state->text;
    *length = static_cast<int32_t>(t.size());
    const size_t n = std::min(t.size(), static_cast<size_t>(capacity));
    if (n > 0) std::memcpy(text, t.data(), n);
    if (t.size() < static_cast<size_t>(capacity)) text[t.size()] = '\0';
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

const char* sy_request_text(sy_request* r) {
  if (!r) return "";
  try {
    // A copy owned by the handle: the engine thread keeps appending to the
    // state's text, so a pointer into it would race with the caller's read.
    std::lock_guard<std::mutex> lock(r->state->mu);
    r->snapshot = r->state->text;
  } catch (...) {
    return "";
  }
  return r->snapshot.c_str();
}

sy_api_status sy_request_info_get(sy_request* r, sy_request_info* out) {
  return guarded([&]() -> sy_api_status {
    if (!r) return fail(SY_API_INVALID_ARGUMENT, "sy_request_info_get: request is required");
    std::lock_guard<std::mutex> lock(r->state->mu);
    sy_request_info info = r->state->info;
    info.completion_tokens = static_cast<int32_t>(r->state->tokens.size());
    write_struct(out, info, SY_SIZE_THROUGH(sy_request_info, struct_size), "sy_request_info_get: out");
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

void sy_request_release(sy_request* r) {
  if (!r) return;
  bool finished;
  {
    std::lock_guard<std::mutex> lock(r->state->mu);
    finished = r->state->finished;
  }
  if (!finished) r->state->engine->cancel(r->state->id);  // nobody will read it
  delete r;
}

sy_api_status sy_engine_metrics(const sy_engine* engine, sy_metrics* out) {
  return guarded([&]() -> sy_api_status {
    if (!engine) return fail(SY_API_INVALID_ARGUMENT, "sy_engine_metrics: engine is required");
    sy::StepEngineMetrics m = engine->engine->metrics();
    sy_metrics r{};
    r.struct_size = sizeof(r);
    r.running = m.running;
    r.waiting = m.waiting;
    r.finished = m.finished;
    r.cancelled = m.cancelled;
    r.failed = m.failed;
    r.prompt_tokens = m.prompt_tokens;
    r.generated_tokens = m.generated_tokens;
    r.cached_tokens = m.cached_tokens;
    r.preemptions = m.preemptions;
    r.steps = m.steps;
    r.kv_blocks_total = m.total_blocks;
    r.kv_blocks_used = m.used_blocks;
    r.spec_drafts = m.spec_drafts;
    r.spec_draft_tokens = m.spec_draft_tokens;
    r.spec_accepted_tokens = m.spec_accepted_tokens;
    const sy::ConstraintMetrics c = engine->engine->constraint_metrics();
    r.constrained_requests = c.requests;
    r.constraint_refusals = c.refused;
    r.constraint_compile_ms = c.compile_ms;
    r.constraint_mask_ms = c.mask_ms;
    r.constraint_mask_rows = c.mask_rows;
    write_struct(out, r, SY_SIZE_THROUGH(sy_metrics, struct_size), "sy_engine_metrics: out");
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

// ---- 1.5

const char* sy_default_manifest(void) {
  static const std::string path = [] {
    try {
      // Whichever file holds this code (libswitchyard.so in lib/, or a
      // program linking the core in bin/): its ../share/switchyard.
      Dl_info info{};
      if (!dladdr(reinterpret_cast<void*>(&sy_default_manifest), &info) || !info.dli_fname) return std::string();
      std::error_code ec;
      const std::filesystem::path lib = std::filesystem::canonical(info.dli_fname, ec);
      if (ec) return std::string();
      const std::filesystem::path m = lib.parent_path().parent_path() / "share" / "switchyard" / "default.yaml";
      return std::filesystem::exists(m, ec) ? m.string() : std::string();
    } catch (...) {
      return std::string();
    }
  }();
  return path.c_str();
}

int32_t sy_engine_vocab_size(const sy_engine* engine) {
  return engine ? static_cast<int32_t>(std::max<int64_t>(engine->engine->vocab_size(), 0)) : 0;
}

sy_api_status sy_logits(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !ids || num_ids <= 0 || !out) return fail(SY_API_INVALID_ARGUMENT, "sy_logits: engine, ids (num_ids > 0) and out are required");
    const std::vector<int> prompt(ids, ids + num_ids);
    const std::vector<float> logits = engine->engine->prompt_logits(prompt);
    const int64_t n = static_cast<int64_t>(logits.size());
    if (capacity < n)
      return fail(SY_API_INVALID_ARGUMENT, "sy_logits: out holds " + std::to_string(capacity) + " floats; the logits are " +
                                               std::to_string(num_ids) + " x " + std::to_string(n / num_ids));
    std::memcpy(out, logits.data(), static_cast<size_t>(n) * sizeof(float));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_tokenizer_open(const char* path, const char* chat_template, sy_tokenizer** out) {
  return guarded([&]() -> sy_api_status {
    if (!path || !*path || !out) return fail(SY_API_INVALID_ARGUMENT, "sy_tokenizer_open: path and out are required");
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return fail(SY_API_NOT_FOUND, std::string("sy_tokenizer_open: ") + path + " does not exist");
    auto t = std::make_unique<sy_tokenizer>();
    t->tokenizer = sy::ModelFolder::load_tokenizer_file(sy::ModelFolder::tokenizer_file_of(path));
    t->path = path;
    t->where = path;
    if (chat_template) t->chat_template = sy::ModelFolder::chat_template_file(chat_template, path);
    if (!t->chat_template) t->chat_template = sy::ModelFolder::chat_template_of(path);
    *out = t.release();
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

void sy_tokenizer_close(sy_tokenizer* tokenizer) { delete tokenizer; }

const sy_tokenizer* sy_engine_tokenizer(const sy_engine* engine) {
  return engine && engine->tok.tokenizer ? &engine->tok : nullptr;
}

int32_t sy_tokenizer_vocab_size(const sy_tokenizer* tokenizer) {
  return tokenizer && tokenizer->tokenizer ? tokenizer->tokenizer->vocab_size() : 0;
}

sy_api_status sy_tokenizer_encode(const sy_tokenizer* tokenizer, const char* text, int32_t add_bos, int32_t* ids, int32_t capacity,
                                  int32_t* count) {
  return guarded([&]() -> sy_api_status {
    if (!tokenizer || !tokenizer->tokenizer || !text || !count || capacity < 0 || (capacity > 0 && !ids))
      return fail(SY_API_INVALID_ARGUMENT, "sy_tokenizer_encode: tokenizer, text and count are required (ids with capacity > 0)");
    const std::vector<int> v = tokenizer->tokenizer->encode(text, add_bos != 0);
    *count = static_cast<int32_t>(v.size());
    for (int32_t i = 0; i < capacity && i < *count; ++i) ids[i] = v[static_cast<size_t>(i)];
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_tokenizer_decode(const sy_tokenizer* tokenizer, const int32_t* ids, int32_t num_ids, int32_t skip_special, char* text,
                                  int64_t capacity, int64_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!tokenizer || !tokenizer->tokenizer || (num_ids > 0 && !ids) || num_ids < 0 || !length || capacity < 0 || (capacity > 0 && !text))
      return fail(SY_API_INVALID_ARGUMENT, "sy_tokenizer_decode: tokenizer, ids and length are required (text with capacity > 0)");
    const int32_t vocab = tokenizer->tokenizer->vocab_size();
    for (int32_t i = 0; i < num_ids; ++i)
      if (ids[i] < 0 || ids[i] >= vocab)
        return fail(SY_API_INVALID_ARGUMENT, "sy_tokenizer_decode: token " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                                 ") is outside the vocabulary of " + std::to_string(vocab));
    const std::string out = tokenizer->tokenizer->decode(std::vector<int>(ids, ids + num_ids), skip_special != 0);
    *length = static_cast<int64_t>(out.size());
    if (capacity > 0) std::memcpy(text, out.data(), static_cast<size_t>(std::min<int64_t>(capacity, *length)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_tokenizer_chat_render(const sy_tokenizer* tokenizer, const char* request_json, char* text, int64_t capacity,
                                       int64_t* length) {
  return chat_render(tokenizer, "sy_tokenizer_chat_render", request_json, text, capacity, length);
}

int32_t sy_engine_kv_block_size(const sy_engine* engine) { return engine ? engine->engine->kv_block_size() : 0; }

sy_api_status sy_block_hashes(int32_t block_size, const int32_t* ids, int32_t num_ids, uint64_t* hashes, int32_t capacity,
                              int32_t* count) {
  return guarded([&]() -> sy_api_status {
    if (block_size <= 0 || num_ids < 0 || (num_ids > 0 && !ids) || !count || capacity < 0 || (capacity > 0 && !hashes))
      return fail(SY_API_INVALID_ARGUMENT, "sy_block_hashes: block_size > 0, ids and count are required (hashes with capacity > 0)");
    const std::vector<uint64_t> h = sy::kv_block_hashes(ids, num_ids, block_size);
    *count = static_cast<int32_t>(h.size());
    for (int32_t i = 0; i < capacity && i < *count; ++i) hashes[i] = h[static_cast<size_t>(i)];
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_kv_events_enable(sy_engine* engine, int32_t capacity) {
  return guarded([&]() -> sy_api_status {
    if (!engine || capacity < 0) return fail(SY_API_INVALID_ARGUMENT, "sy_kv_events_enable: engine and capacity >= 0 are required");
    try {
      engine->engine->enable_kv_events(static_cast<size_t>(capacity));
    } catch (const sy::Error& e) {
      return fail(status_for(e.kind()), std::string("sy_kv_events_enable: ") + e.what());
    }
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_kv_events_poll(sy_engine* engine, int32_t max, const sy_kv_event* const** events, int32_t* count) {
  return guarded([&]() -> sy_api_status {
    if (!engine || max < 0 || !events || !count)
      return fail(SY_API_INVALID_ARGUMENT, "sy_kv_events_poll: engine, events and count are required (max >= 0)");
    engine->polled_events = engine->engine->poll_kv_events(static_cast<size_t>(max));
    engine->polled_structs.assign(engine->polled_events.size(), sy_kv_event{});
    engine->polled_pointers.clear();
    for (size_t i = 0; i < engine->polled_events.size(); ++i) {
      const sy::KvEvent& e = engine->polled_events[i];
      sy_kv_event& o = engine->polled_structs[i];
      o.struct_size = sizeof(sy_kv_event);
      o.kind = static_cast<int32_t>(e.kind);
      o.sequence = e.sequence;
      o.block_hash = e.hash;
      o.parent_hash = e.parent;
      o.tokens = e.tokens.empty() ? nullptr : e.tokens.data();
      o.num_tokens = static_cast<int32_t>(e.tokens.size());
      o.device = engine->engine->kv_events_device();
      o.timestamp = e.timestamp;
      engine->polled_pointers.push_back(&o);
    }
    *events = engine->polled_pointers.data();
    *count = static_cast<int32_t>(engine->polled_pointers.size());
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_kv_export(sy_engine* engine, const int32_t* ids, int32_t num_ids, void* out, int64_t capacity, int64_t* size) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !ids || num_ids <= 0 || !size || capacity < 0 || (capacity > 0 && !out))
      return fail(SY_API_INVALID_ARGUMENT, "sy_kv_export: engine, ids (num_ids > 0) and size are required (out with capacity > 0)");
    const std::string data = engine->engine->export_kv(std::vector<int32_t>(ids, ids + num_ids));
    *size = static_cast<int64_t>(data.size());
    if (capacity > 0) std::memcpy(out, data.data(), static_cast<size_t>(std::min<int64_t>(capacity, *size)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_kv_import(sy_engine* engine, const void* data, int64_t size, int32_t* cached_tokens) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !data || size <= 0) return fail(SY_API_INVALID_ARGUMENT, "sy_kv_import: engine and data (size > 0) are required");
    const int32_t n =
        engine->engine->import_kv(std::string(static_cast<const char*>(data), static_cast<size_t>(size)));
    if (cached_tokens) *cached_tokens = n;
    return static_cast<sy_api_status>(SY_API_OK);
  });
}


}  // extern "C"
