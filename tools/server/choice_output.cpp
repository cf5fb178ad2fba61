#include "choice_output.h"

#include <atomic>
#include <random>

#include "server_metrics.h"
#include "tokenizer_endpoints.h"

namespace sy::server {

using json = nlohmann::json;

namespace {

// OpenAI's call ids: "call_" and 24 random letters and digits.
// (Mistral's templates take nine letters and digits and nothing else.)
std::string new_call_id(bool short_id) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = short_id ? "" : "call_";
  for (int i = 0; i < (short_id ? 9 : 24); ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

}  // namespace

ChoiceOutput::ChoiceOutput(sy_engine* engine, const TokenNames& names, const ChoiceSettings& settings, int index,
                           const std::vector<int32_t>& prompt, std::string prompt_text, const PromptLogprobs* prompt_lps)
    : engine_(engine), names_(names), s_(settings), index_(index), prompt_(prompt), prompt_text_(std::move(prompt_text)), prompt_lps_(prompt_lps) {
  // Token-id prompts echo as their text.
  if (s_.echo && prompt_text_.empty() && sy_engine_tokenizer(engine)) prompt_text_ = decode_ids(sy_engine_tokenizer(engine), prompt_, true);
}

void ChoiceOutput::token(int32_t id, const std::string& text, std::optional<Logprobs> lp) {
  ids_.push_back(id);
  pieces_.push_back(text);
  lps_.push_back(std::move(lp));
  text_ += text;
}

void ChoiceOutput::finish(const sy_request_info& info) {
  info_ = info;
  final_text_ = info.final_text ? info.final_text : "";
  error_ = info.error ? info.error : "";
  info_.error = nullptr;
  info_.final_text = nullptr;
  text_ += final_text_;
  finished_ = true;
}

std::string ChoiceOutput::cut_at_stop(std::string text) const {
  size_t cut = std::string::npos;
  for (const std::string& s : s_.stops) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

ChoiceOutput::Parsed ChoiceOutput::parse_now(bool final) const {
  Parsed p;
  const ChatTools& t = s_.tools;
  if (t.forced()) {
    // The grammar made the text a call (named) or a list of calls.
    if (t.choice == "function") {
      p.calls.push_back({{"name", t.name}, {"arguments", text_}});
      return p;
    }
    const json v = final ? json::parse(text_, nullptr, false) : json();
    if (v.is_array()) {
      for (const json& c : v)
        if (c.is_object() && c.contains("name") && c["name"].is_string())
          p.calls.push_back({{"name", c["name"]}, {"arguments", c.contains("arguments") ? c["arguments"].dump() : "{}"}});
    }
    if (final && p.calls.empty()) p.content = text_;  // cut short (max_tokens): what was written, as text
    return p;
  }
  if (!s_.parse) {
    p.content = text_;
    return p;
  }
  std::string out(4096, '\0');
  int64_t n = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (sy_parse_output_as(engine_, s_.parser.c_str(), ids_.data(), static_cast<int32_t>(ids_.size()), final ? 1 : 0, out.data(),
                           static_cast<int64_t>(out.size()), &n) != SY_API_OK) {
      p.content = text_;
      return p;
    }
    if (n <= static_cast<int64_t>(out.size())) break;
    out.resize(static_cast<size_t>(n));
  }
  out.resize(static_cast<size_t>(n));
  const json j = json::parse(out);
  p.content = cut_at_stop(j["content"].get<std::string>());
  p.has_reasoning = j["reasoning_content"].is_string();
  if (p.has_reasoning) p.reasoning = j["reasoning_content"].get<std::string>();
  // Calls only when tools were offered: otherwise the text stays the answer.
  if (s_.tools.offered()) {
    for (const json& c : j["tool_calls"]) p.calls.push_back(c);
    if (j.contains("partial_call")) p.partial = j["partial_call"];
  }
  else if (!j["tool_calls"].empty() && final)
    p.content = cut_at_stop(text_);
  return p;
}

json ChoiceOutput::tool_call(size_t k, const json& call) {
  while (call_ids_.size() <= k) call_ids_.push_back(new_call_id(s_.short_call_ids));
  return {{"id", call_ids_[k]}, {"type", "function"}, {"function", {{"name", call["name"]}, {"arguments", call["arguments"]}}}};
}

std::string ChoiceOutput::finish_reason(size_t calls) const {
  const std::string reason = finish_reason_name(info_.finish_reason);
  // OpenAI: "tool_calls" when the model chose to call (a named tool_choice
  // reads "stop", the call having been asked for).
  if (calls > 0 && reason == "stop" && s_.tools.choice != "function") return "tool_calls";
  return reason;
}

// The echoed prompt's tokens, their offsets read against the text echoed:
// a SentencePiece tokenizer's first piece carries a space (its dummy
// prefix) that the text does not have.
void ChoiceOutput::add_prompt(CompletionLogprobs& out) const {
  if (!prompt_lps_) return;
  size_t at = 0;  // bytes of prompt_text_ matched so far
  for (size_t i = 0; i < prompt_.size(); ++i) {
    std::optional<size_t> chars;
    const size_t n = names_.text_chars(prompt_[i]);
    if (n > 0) {
      const std::string b = names_.bytes(prompt_[i]);
      if (prompt_text_.compare(at, b.size(), b) == 0) {
        at += b.size();
      } else if (b[0] == ' ' && prompt_text_.compare(at, b.size() - 1, b, 1) == 0) {
        at += b.size() - 1;
        chars = n - 1;
      } else {
        at += b.size();  // text the tokenizer normalised: counted as its bytes
      }
    }
    out.add(names_, prompt_[i], i == 0 ? std::nullopt : std::optional<Logprobs>(prompt_lps_->positions[i - 1]), chars);
  }
}

json ChoiceOutput::completion_logprobs() const {
  CompletionLogprobs out;
  if (s_.echo) add_prompt(out);
  for (size_t i = 0; i < ids_.size(); ++i) out.add(names_, ids_[i], lps_[i]);
  return out.to_json();
}

json ChoiceOutput::whole() {
  json choice = {{"index", index_}};
  if (s_.chat) {
    const Parsed p = parse_now(true);
    json message = {{"role", "assistant"}, {"content", p.content.empty() && !p.calls.empty() ? json(nullptr) : json(p.content)}};
    if (p.has_reasoning) message["reasoning_content"] = p.reasoning;
    if (!p.calls.empty()) {
      message["tool_calls"] = json::array();
      for (size_t k = 0; k < p.calls.size(); ++k) message["tool_calls"].push_back(tool_call(k, p.calls[k]));
    }
    choice["message"] = message;
    json logprobs = nullptr;
    if (s_.logprobs) {
      logprobs = {{"content", json::array()}};
      for (size_t i = 0; i < ids_.size(); ++i)
        if (lps_[i]) logprobs["content"].push_back(chat_logprob(names_, ids_[i], *lps_[i]));
    }
    choice["logprobs"] = logprobs;
    choice["finish_reason"] = finish_reason(p.calls.size());
  } else {
    choice["text"] = s_.echo ? prompt_text_ + text_ : text_;
    choice["logprobs"] = s_.logprobs ? completion_logprobs() : json(nullptr);
    choice["finish_reason"] = finish_reason(0);
  }
  if (s_.prompt_logprobs && prompt_lps_) {
    json pl = json::array({nullptr});
    for (size_t i = 1; i < prompt_.size(); ++i)
      pl.push_back(prompt_logprob_entry(names_, prompt_[i], prompt_lps_->positions[i - 1].logprob, prompt_lps_->ranks[i - 1],
                                        prompt_lps_->positions[i - 1].top));
    choice["prompt_logprobs"] = pl;
  }
  if (s_.token_ids) {
    choice["prompt_token_ids"] = prompt_;
    choice["token_ids"] = ids_;
  }
  choice["stop_reason"] = nullptr;
  return choice;
}

std::vector<json> ChoiceOutput::deltas() {
  std::vector<json> out;
  auto delta = [&](json d) { return json{{"index", index_}, {"delta", std::move(d)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}; };
  auto text_chunk = [&](const std::string& text) {
    return json{{"index", index_}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  };
  if (!sent_first_) {
    sent_first_ = true;
    if (s_.chat) out.push_back(delta({{"role", "assistant"}, {"content", ""}}));
    if (!s_.chat && s_.echo) {
      json c = text_chunk(prompt_text_);
      if (s_.logprobs) {
        CompletionLogprobs lp;
        add_prompt(lp);
        c["logprobs"] = lp.to_json();
      }
      out.push_back(c);
    }
  }
  const size_t from = streamed_tokens_;
  streamed_tokens_ = ids_.size();
  const bool plain = !s_.chat || (!s_.parse && !s_.tools.forced());
  size_t calls = 0;
  if (plain) {
    // A chunk per token with text (or with logprobs or ids to show).
    if (stream_offset_ == std::string::npos) stream_offset_ = s_.echo ? utf8_chars(prompt_text_) : 0;
    for (size_t i = from; i < ids_.size(); ++i) {
      json lp = nullptr;
      if (s_.logprobs && lps_[i] && s_.chat) lp = {{"content", json::array({chat_logprob(names_, ids_[i], *lps_[i])})}};
      if (s_.logprobs && !s_.chat) {
        CompletionLogprobs one(stream_offset_);
        one.add(names_, ids_[i], lps_[i]);
        stream_offset_ += names_.text_chars(ids_[i]);
        lp = one.to_json();
      }
      if (pieces_[i].empty() && !s_.token_ids && lp.is_null()) continue;
      json c = s_.chat ? delta({{"content", pieces_[i]}}) : text_chunk(pieces_[i]);
      c["logprobs"] = lp;
      if (s_.token_ids) c["token_ids"] = json::array({ids_[i]});
      out.push_back(c);
    }
    if (finished_ && !final_text_.empty()) out.push_back(s_.chat ? delta({{"content", final_text_}}) : text_chunk(final_text_));
  } else {
    const Parsed p = parse_now(finished_);
    calls = p.calls.size();
    if (p.has_reasoning && p.reasoning.size() > sent_reasoning_.size() && p.reasoning.compare(0, sent_reasoning_.size(), sent_reasoning_) == 0) {
      out.push_back(delta({{"reasoning_content", p.reasoning.substr(sent_reasoning_.size())}}));
      sent_reasoning_ = p.reasoning;
    }
    if (p.content.size() > sent_content_.size() && p.content.compare(0, sent_content_.size(), sent_content_) == 0) {
      json c = delta({{"content", p.content.substr(sent_content_.size())}});
      if (s_.logprobs) {
        c["logprobs"] = {{"content", json::array()}};
        for (size_t i = from; i < ids_.size(); ++i)
          if (lps_[i]) c["logprobs"]["content"].push_back(chat_logprob(names_, ids_[i], *lps_[i]));
      }
      out.push_back(c);
      sent_content_ = p.content;
    }
    if (s_.tools.choice == "function") {
      // A named call streams its arguments as they are written.
      const std::string& args = text_;
      if (sent_calls_ == 0 && (!args.empty() || finished_)) {
        json call = tool_call(0, {{"name", s_.tools.name}, {"arguments", ""}});
        call["index"] = 0;
        out.push_back(delta({{"tool_calls", json::array({call})}}));
        sent_calls_ = 1;
      }
      if (args.size() > sent_arguments_) {
        out.push_back(delta({{"tool_calls", json::array({{{"index", 0}, {"function", {{"arguments", args.substr(sent_arguments_)}}}}})}}));
        sent_arguments_ = args.size();
      }
    } else {
      // Each call once its name is known, then its arguments as they grow
      // (the parser's partial call; whole calls keep the text the model
      // wrote, so the pieces add up to them).
      std::vector<json> known = p.calls;
      if (!p.partial.is_null()) known.push_back(p.partial);
      for (size_t k = 0; k < known.size(); ++k) {
        const std::string args = known[k]["arguments"].get<std::string>();
        if (k >= sent_calls_) {
          json call = tool_call(k, known[k]);
          call["index"] = k;
          out.push_back(delta({{"tool_calls", json::array({call})}}));
          sent_calls_ = k + 1;
          call_arguments_sent_.push_back(args);
          continue;
        }
        std::string& sent = call_arguments_sent_[k];
        if (args.size() > sent.size() && args.compare(0, sent.size(), sent) == 0) {
          out.push_back(delta({{"tool_calls", json::array({{{"index", k}, {"function", {{"arguments", args.substr(sent.size())}}}}})}}));
          sent = args;
        }
      }
    }
  }
  if (finished_ && !sent_finish_) {
    sent_finish_ = true;
    json last = s_.chat ? delta(json::object()) : text_chunk("");
    last["finish_reason"] = finish_reason(s_.tools.choice == "function" ? 1 : std::max(calls, sent_calls_));
    last["stop_reason"] = nullptr;
    out.push_back(last);
  }
  return out;
}

}  // namespace sy::server
