#include "openai_protocol.h"

#include <chrono>
#include <cstring>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <cstdio>
#include <optional>
#include <random>

#include "choice_output.h"
#include "embeddings_endpoint.h"
#include "responses_api.h"
#include "tokenizer_endpoints.h"

namespace sy::server {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const ApiError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

// ---- the engine's callbacks -> one event queue per call

struct Event {
  int index;
  std::string text;
  int32_t token = -1;  // the generated token (-1 on the final event)
  bool final = false;
  sy_request_info info{};
  std::string error, final_text;  // what info's pointers held during the callback
  std::optional<Logprobs> logprobs;
};

struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  int pending = 0;  // choices not finished
  ServerMetrics* metrics = nullptr;
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
    ch->c->events.push_back({ch->index, text, token, false, {}, {}, {}, std::move(ch->pending)});
    ch->pending.reset();
  }
  ch->c->cv.notify_all();
}

void on_finish(void* user, const sy_request_info* info) {
  auto* ch = static_cast<Choice*>(user);
  std::shared_ptr<Completion> c = ch->c;
  // Metrics first: once the final event is queued, the call may end and a
  // draining server may destroy them (found by TSan).
  if (c->metrics) c->metrics->record(*info);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->events.push_back({ch->index, "", -1, true, *info, info->error ? info->error : "", info->final_text ? info->final_text : "", std::nullopt});
    --c->pending;
  }
  c->cv.notify_all();
  delete ch;  // the last callback of this request
}

}  // namespace

// ---- one call

struct Call::State {
  OpenAIProtocol* p = nullptr;
  bool chat = false;
  ParsedRequest parsed;
  std::shared_ptr<Completion> c = std::make_shared<Completion>();
  std::vector<sy_request*> reqs;
  std::unique_ptr<TokenNames> names;
  std::vector<PromptLogprobs> prompt_lps;  // per prompt, when asked for
  std::vector<ChoiceOutput> choices;
  std::string id;
  int64_t created = 0;
  bool finished = false;
  std::unique_ptr<ResponseBuilder> responses;  // /v1/responses: the chat answer re-dressed

  // Gives an event to its choice; the final event's strings back into its info.
  void deliver(Event& e) {
    ChoiceOutput& out = choices[static_cast<size_t>(e.index)];
    if (!e.final) return out.token(e.token, e.text, std::move(e.logprobs));
    e.info.error = e.error.c_str();
    e.info.final_text = e.final_text.c_str();
    out.finish(e.info);
  }

  // OpenAI's usage: each prompt counted once (not once per choice), and its
  // cached part once (the most any of its choices found).
  json usage() const {
    int prompt = 0, completion = 0, cached = 0;
    const size_t n = static_cast<size_t>(parsed.sampling.n);
    for (size_t i = 0; i < parsed.prompts.size(); ++i) {
      prompt += static_cast<int>(parsed.prompts[i].size());
      int most = 0;
      for (size_t j = 0; j < n; ++j) most = std::max(most, choices[i * n + j].cached_tokens());
      cached += most;
    }
    for (const ChoiceOutput& ch : choices) completion += ch.completion_tokens();
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  void release() {
    for (sy_request* r : reqs) {
      p->track(r, false);
      sy_request_release(r);  // cancels it if it is still running
    }
    reqs.clear();
  }
};

Call::~Call() {
  if (!s_) return;
  s_->release();
  --s_->p->in_flight_;
}

bool Call::streaming() const { return s_->parsed.sampling.stream; }

bool Call::wait(int wait_ms) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.c->mu);
  return s.c->cv.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return s.c->pending == 0; });
}

json Call::whole() {
  State& s = *s_;
  std::string error;
  {
    std::unique_lock<std::mutex> lock(s.c->mu);
    s.c->cv.wait(lock, [&] { return s.c->pending == 0; });
    for (Event& e : s.c->events) {
      if (e.final && e.info.finish_reason == SY_FINISH_ERROR) error = e.error;
      s.deliver(e);
    }
    s.c->events.clear();
  }
  s.release();
  if (!error.empty()) throw ApiError{500, error, "server_error", "", ""};
  json choices = json::array();
  for (ChoiceOutput& ch : s.choices) choices.push_back(ch.whole());
  json out = {{"id", s.id}, {"object", s.chat ? "chat.completion" : "text_completion"}, {"created", s.created}, {"model", s.p->model_name()},
              {"choices", choices}, {"usage", s.usage()}};
  return s.responses ? s.responses->from_chat(out) : out;
}

bool Call::next_events(std::string& out, int wait_ms) {
  State& s = *s_;
  if (s.finished) return true;
  std::deque<Event> batch;
  bool all_done;
  {
    std::unique_lock<std::mutex> lock(s.c->mu);
    s.c->cv.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return !s.c->events.empty() || s.c->pending == 0; });
    batch.swap(s.c->events);
    all_done = s.c->pending == 0 && s.c->events.empty();
  }
  auto send = [&](const json& payload) {
    if (s.responses) return s.responses->on_chunk(payload, out);
    out += "data: " + dump(payload) + "\n\n";
  };
  const std::string object = s.chat ? "chat.completion.chunk" : "text_completion";
  std::set<int> touched;
  std::vector<std::string> errors;
  for (Event& e : batch) {
    touched.insert(e.index);
    if (e.final && e.info.finish_reason == SY_FINISH_ERROR) errors.push_back(e.error);
    s.deliver(e);
  }
  if (all_done)
    for (size_t i = 0; i < s.choices.size(); ++i) touched.insert(static_cast<int>(i));
  for (int i : touched)
    for (const json& d : s.choices[static_cast<size_t>(i)].deltas()) {
      json chunk = {{"id", s.id}, {"object", object}, {"created", s.created}, {"model", s.p->model_name()}, {"choices", json::array({d})}};
      if (s.parsed.sampling.continuous_usage) chunk["usage"] = s.usage();
      send(chunk);
    }
  // The status line went out with the first byte: an engine error travels
  // as an event (as vLLM streams it), with its message.
  for (const std::string& err : errors) {
    if (s.responses) s.responses->on_error(err, out);
    else send(error_json({500, err, "server_error", "", ""}));
  }
  if (!all_done) return false;
  if (s.parsed.sampling.include_usage)
    send({{"id", s.id}, {"object", object}, {"created", s.created}, {"model", s.p->model_name()}, {"choices", json::array()}, {"usage", s.usage()}});
  if (s.responses) s.responses->finish(out);
  else out += "data: [DONE]\n\n";
  s.finished = true;
  s.release();
  return true;
}

// ---- the protocol

OpenAIProtocol::OpenAIProtocol(sy_engine* e, ProtocolOptions o)
    : engine_(e), opt_(std::move(o)), metrics_(opt_.model_name.empty() ? sy_engine_model_name(e) : opt_.model_name) {
  if (opt_.model_name.empty()) opt_.model_name = sy_engine_model_name(e);
  if (opt_.max_prompt_tokens <= 0) opt_.max_prompt_tokens = sy_engine_max_context(e);
  started_ = static_cast<int64_t>(std::time(nullptr));
  std::random_device seed_source;
  next_id_ = (static_cast<uint64_t>(seed_source()) << 32) ^ seed_source();
  next_seed_ = (static_cast<uint64_t>(seed_source()) << 32) ^ seed_source();
  // The model folder's recommended sampling, as the engine read it.
  const json d = json::parse(sy_engine_sampling_defaults(e));
  if (d.contains("temperature")) defaults_.default_temperature = d["temperature"].get<float>();
  if (d.contains("top_p")) defaults_.default_top_p = d["top_p"].get<float>();
  if (d.contains("top_k")) defaults_.default_top_k = d["top_k"].get<int>();
  if (d.contains("min_p")) defaults_.default_min_p = d["min_p"].get<float>();
  if (d.contains("repetition_penalty")) defaults_.default_repetition_penalty = d["repetition_penalty"].get<float>();
  has_chat_template_ = *sy_engine_chat_template_name(e) != '\0';
  tokenizer_info_ = json::parse(sy_engine_tokenizer_info(e));
  const std::string source = tokenizer_info_.value("chat_template", json()).is_string() ? tokenizer_info_["chat_template"].get<std::string>() : "";
  const std::string parser = sy_engine_tool_parser(e);
  defaults_.vocab_size = sy_engine_vocab_size(e);
  defaults_.template_facts = TemplateFacts::of(source, parser);
  defaults_.has_chat_template = has_chat_template_;
  defaults_.tool_parser_of = [](const std::string& text) { return std::string(sy_tool_parser_for_template(text.c_str())); };
  defaults_.tool_call_constraint = [e](const std::string& family, const std::string& tools, bool one_call) {
    std::string spec(4096, '\0');
    int64_t n = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (sy_tool_call_constraint(e, family.c_str(), tools.c_str(), one_call ? 1 : 0, spec.data(), static_cast<int64_t>(spec.size()), &n) != SY_API_OK)
        throw bad_request(sy_last_error(), "tools");
      if (n <= static_cast<int64_t>(spec.size())) break;
      spec.resize(static_cast<size_t>(n));
    }
    spec.resize(static_cast<size_t>(n));
    return spec;
  };
}

OpenAIProtocol::~OpenAIProtocol() = default;

RequestLimits OpenAIProtocol::limits() const {
  RequestLimits l = defaults_;
  l.model_name = opt_.model_name;
  l.max_tokens = opt_.max_tokens_limit;
  l.max_n = opt_.max_n;
  l.max_prompt_tokens = opt_.max_prompt_tokens;
  return l;
}

Tokenize OpenAIProtocol::tokenizer() const {
  return [this](const std::string& text, bool add_special) {
    if (!sy_engine_has_tokenizer(engine_)) throw bad_request("this model has no tokenizer: send token ids", "prompt");
    std::vector<int32_t> ids(text.size() + 8);
    int32_t n = 0;
    if (sy_tokenize(engine_, text.c_str(), add_special ? 1 : 0, ids.data(), static_cast<int32_t>(ids.size()), &n) != SY_API_OK)
      throw bad_request(sy_last_error(), "prompt");
    ids.resize(static_cast<size_t>(n));
    return ids;
  };
}

// The conversation through the engine's chat template (sy_chat_render).
RenderChat OpenAIProtocol::chat_renderer() const {
  return [this](const nlohmann::ordered_json& req) {
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
  };
}

void OpenAIProtocol::track(sy_request* r, bool add) {
  std::lock_guard<std::mutex> lock(active_mu_);
  if (add) active_.insert(r);
  else active_.erase(r);
}

void OpenAIProtocol::cancel_all() {
  std::lock_guard<std::mutex> lock(active_mu_);
  for (sy_request* r : active_) sy_request_cancel(r);
}

json OpenAIProtocol::models() const { return {{"object", "list"}, {"data", json::array({model(opt_.model_name)})}}; }

json OpenAIProtocol::model(const std::string& id) const {
  if (id != opt_.model_name)
    throw ApiError{404, "The model '" + id + "' does not exist; this server serves '" + opt_.model_name + "'", "invalid_request_error", "model",
                   "model_not_found"};
  return {{"id", opt_.model_name}, {"object", "model"}, {"created", started_}, {"owned_by", "switchyard"}, {"root", opt_.model_name},
          {"parent", nullptr}, {"max_model_len", sy_engine_max_context(engine_)}};
}

json OpenAIProtocol::tokenize(const std::string& body) {
  return tokenize_request(engine_, body, tokenizer(), chat_renderer(), defaults_.template_facts.renders_tools);
}

json OpenAIProtocol::detokenize(const std::string& body) const { return detokenize_request(engine_, body); }

json OpenAIProtocol::embeddings(const std::string& body) { return embeddings_request(engine_, body, limits(), tokenizer()); }

std::string OpenAIProtocol::metrics() const {
  sy_metrics m{};
  m.struct_size = sizeof(m);
  sy_engine_metrics(engine_, &m);
  return metrics_.prometheus(m);
}

std::vector<std::vector<int32_t>> OpenAIProtocol::prompts(const std::string& body, Endpoint endpoint) const {
  if (endpoint == Endpoint::responses) return prompts(dump(chat_request_from_responses(body)), Endpoint::chat);
  return parse_request(body, endpoint != Endpoint::completions, limits(), tokenizer(), chat_renderer()).prompts;
}

std::shared_ptr<Call> OpenAIProtocol::start(const std::string& body, Endpoint endpoint) {
  if (endpoint == Endpoint::responses) {
    std::shared_ptr<Call> call;
    try {
      call = start(dump(chat_request_from_responses(body)), Endpoint::chat);
    } catch (ApiError& e) {
      // The chat field's name, as the client wrote it.
      static const std::pair<const char*, const char*> names[] = {{"max_tokens", "max_output_tokens"}, {"response_format", "text"}, {"messages", "input"}};
      for (const auto& [chat_name, name] : names)
        if (e.param == chat_name) {
          e.param = name;
          if (const size_t at = e.message.find(chat_name); at != std::string::npos) e.message.replace(at, std::strlen(chat_name), name);
        }
      throw;
    }
    json request = json::parse(body);
    if (!request.contains("model") || request["model"].is_null()) request["model"] = opt_.model_name;
    char id[17];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(next_id_++));
    call->s_->responses = std::make_unique<ResponseBuilder>(std::move(request), std::string("resp_") + id, call->s_->created);
    return call;
  }
  const bool chat = endpoint == Endpoint::chat;
  auto call = std::shared_ptr<Call>(new Call());
  call->s_ = std::make_unique<Call::State>();
  Call::State& st = *call->s_;
  st.p = this;
  ++in_flight_;  // from here the call's destructor counts it out
  st.chat = chat;
  st.parsed = parse_request(body, chat, limits(), tokenizer(), chat_renderer());
  const Sampling& s = st.parsed.sampling;
  st.names = std::make_unique<TokenNames>(engine_, s.tokens_as_ids);
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(next_id_++));
  st.id = std::string(chat ? "chatcmpl-" : "cmpl-") + id;
  st.created = static_cast<int64_t>(std::time(nullptr));
  // Prompt logprobs (computed before generation, serialised with the
  // engine's steps) and one ChoiceOutput per prompt and n.
  const bool want_prompt_lps = (s.echo && s.logprobs) || s.prompt_logprobs >= 0;
  ChoiceSettings cs;
  cs.chat = chat;
  cs.logprobs = s.logprobs;
  cs.echo = s.echo;
  cs.token_ids = st.parsed.return_token_ids;
  cs.prompt_logprobs = s.prompt_logprobs >= 0;
  cs.tools = st.parsed.tools;
  // Reasoning is split out where the template knows a thinking mark.
  const TemplateFacts& facts = st.parsed.template_facts;
  cs.parser = facts.tool_parser;
  cs.parse = chat && (has_chat_template_ || !st.parsed.chat_template.empty()) && sy_engine_has_tokenizer(engine_) &&
             ((st.parsed.tools.offered() && !st.parsed.tools.forced()) || facts.splits_reasoning);
  cs.stops = s.stop;
  cs.short_call_ids = facts.short_tool_call_ids;
  const auto& prompts = st.parsed.prompts;
  if (want_prompt_lps)
    for (const auto& p : prompts) st.prompt_lps.push_back(prompt_logprobs(engine_, p, std::max(s.top_logprobs, s.prompt_logprobs)));
  st.choices.reserve(prompts.size() * static_cast<size_t>(s.n));
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int j = 0; j < s.n; ++j)
      st.choices.emplace_back(engine_, *st.names, cs, static_cast<int>(st.choices.size()), prompts[p], st.parsed.prompt_texts[p],
                              want_prompt_lps ? &st.prompt_lps[p] : nullptr);
  if (s.max_tokens == 0) {
    // max_tokens 0 (completions): the prompt, with its logprobs, and nothing more.
    for (size_t i = 0; i < st.choices.size(); ++i) {
      sy_request_info info{};
      info.struct_size = sizeof(info);
      info.finish_reason = SY_FINISH_LENGTH;
      info.prompt_tokens = static_cast<int32_t>(prompts[i / static_cast<size_t>(s.n)].size());
      st.c->events.push_back({static_cast<int>(i), "", -1, true, info, "", "", std::nullopt});
    }
    return call;
  }
  st.c->metrics = &metrics_;
  std::vector<const char*> stops;
  for (const auto& x : s.stop) stops.push_back(x.c_str());
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  for (const auto& [t, b] : s.logit_bias) {
    bias_ids.push_back(t);
    bias_values.push_back(b);
  }
  for (size_t i = 0; i < st.choices.size(); ++i) {
    const size_t p = i / static_cast<size_t>(s.n);
    const auto j = static_cast<uint64_t>(i % static_cast<size_t>(s.n));
    sy_sampling_params sp{};
    sp.struct_size = sizeof(sp);
    sp.temperature = static_cast<float>(s.temperature);
    sp.top_k = s.top_k;
    sp.top_p = static_cast<float>(s.top_p);
    sp.min_p = static_cast<float>(s.min_p);
    sp.presence_penalty = static_cast<float>(s.presence_penalty);
    sp.frequency_penalty = static_cast<float>(s.frequency_penalty);
    sp.repetition_penalty = static_cast<float>(s.repetition_penalty);
    // Unseeded requests each get their own seed, so they differ.
    sp.seed = s.seed >= 0 ? static_cast<uint64_t>(s.seed) + j : next_seed_++;
    sp.logit_bias_ids = bias_ids.data();
    sp.logit_bias_values = bias_values.data();
    sp.num_logit_bias = static_cast<int32_t>(bias_ids.size());
    sy_request_params params{};
    params.struct_size = sizeof(params);
    params.prompt_ids = prompts[p].data();
    params.num_prompt_ids = static_cast<int32_t>(prompts[p].size());
    params.max_tokens = max_tokens_for(s, prompts[p].size(), sy_engine_max_context(engine_), opt_.max_tokens_limit);
    params.sampling_params = &sp;
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
    params.user = new Choice{st.c, static_cast<int>(i), std::nullopt};
    {
      std::lock_guard<std::mutex> lock(st.c->mu);
      ++st.c->pending;
    }
    sy_request* r = nullptr;
    if (const sy_api_status status = sy_submit(engine_, &params, &r); status != SY_API_OK) {
      std::string msg = sy_last_error();
      delete static_cast<Choice*>(params.user);
      {
        std::lock_guard<std::mutex> lock(st.c->mu);
        --st.c->pending;
      }
      // (the call's destructor releases what was queued)
      // The request was fine but the engine cannot take it (a plugin it
      // depends on is out of service, no memory): 503, as for overload.
      if (status == SY_API_PLUGIN_FAILURE || status == SY_API_OUT_OF_MEMORY || status == SY_API_SHUTTING_DOWN)
        throw ApiError{503, msg, "server_error", "", "service_unavailable"};
      // A constraint the logits processor refused names its field.
      const bool constraint = !s.constraint_kind.empty() && (msg.find("constraint") != std::string::npos ||
                                                             msg.find("structured output") != std::string::npos);
      throw bad_request(msg, constraint ? s.constraint_param : "prompt");
    }
    st.reqs.push_back(r);
    track(r, true);
  }
  return call;
}

}  // namespace sy::server
