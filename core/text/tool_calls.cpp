#include "text/tool_calls.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace sy {

namespace {

using json = nlohmann::ordered_json;
using Reader = void (*)(const std::string& text, bool final, ParsedOutput& out);

// ---- helpers shared by the readers

// The end (one past) of the JSON object or array starting at `from`, or npos
// when the text stops before it closes.
size_t json_end(const std::string& s, size_t from) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

std::string trim(const std::string& s) {
  const size_t b = skip_space(s, 0);
  size_t e = s.size();
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The span [begin, end) of member `key`'s value in the JSON object that
// starts at `from` (its own members only); end is npos while the value is
// still being written, begin npos when the key is not (yet) there.
std::pair<size_t, size_t> member_span(const std::string& s, size_t from, const std::string& key) {
  const size_t npos = std::string::npos;
  auto string_end = [&](size_t i) {  // i at the opening quote: one past the closing one, or npos
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\\') ++i;
      else if (s[i] == '"') return i + 1;
    }
    return npos;
  };
  size_t i = skip_space(s, from);
  if (i >= s.size() || s[i] != '{') return {npos, npos};
  for (++i;;) {
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != '"') return {npos, npos};
    const size_t k_end = string_end(i);
    if (k_end == npos) return {npos, npos};
    const std::string k = s.substr(i + 1, k_end - i - 2);
    i = skip_space(s, k_end);
    if (i >= s.size() || s[i] != ':') return {npos, npos};
    const size_t v = skip_space(s, i + 1);
    if (v >= s.size()) return {npos, npos};
    size_t v_end;
    if (s[v] == '{' || s[v] == '[') v_end = json_end(s, v);
    else if (s[v] == '"') v_end = string_end(v);
    else {
      v_end = v;
      while (v_end < s.size() && s[v_end] != ',' && s[v_end] != '}') ++v_end;
      if (v_end >= s.size()) v_end = npos;
    }
    if (k == key) return {v, v_end};
    if (v_end == npos) return {npos, npos};
    i = skip_space(s, v_end);
    if (i >= s.size() || s[i] != ',') return {npos, npos};
    ++i;
  }
}

// The call being written in `s` from `from` (an object, or a list whose
// last object is unfinished): its name once written, its arguments so far
// when they are an object. False when neither is known yet.
bool partial_call(const std::string& s, size_t from, ParsedOutput& out) {
  size_t at = skip_space(s, from);
  if (at < s.size() && s[at] == '[') {
    at = skip_space(s, at + 1);
    // Calls before the last one (a comma after them) are read when the list
    // closes; the last one, finished or not, is the one being written.
    while (at < s.size() && s[at] == '{') {
      const size_t end = json_end(s, at);
      if (end == std::string::npos) break;
      const size_t next = skip_space(s, end);
      if (next >= s.size() || s[next] != ',') break;
      at = skip_space(s, next + 1);
    }
  }
  std::pair<size_t, size_t> name = member_span(s, at, "name");
  if (name.first == std::string::npos) name = member_span(s, at, "tool_name");
  if (name.first == std::string::npos || name.second == std::string::npos || s[name.first] != '"') return false;
  const json n = json::parse(s.substr(name.first, name.second - name.first), nullptr, false);
  if (!n.is_string()) return false;
  out.partial.name = n.get<std::string>();
  std::pair<size_t, size_t> args = member_span(s, at, "arguments");
  if (args.first == std::string::npos) args = member_span(s, at, "parameters");
  out.partial.arguments.clear();
  if (args.first != std::string::npos && s[args.first] == '{')
    out.partial.arguments = s.substr(args.first, args.second == std::string::npos ? std::string::npos : args.second - args.first);
  out.has_partial = true;
  return true;
}

// Arguments as JSON text: an object as it is, a string that holds JSON as
// that JSON (some models write the arguments as a string).
std::string arguments_text(const json& v) {
  if (v.is_string()) {
    const json parsed = json::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded()) return parsed.dump();
  }
  return v.is_null() ? "{}" : v.dump();
}

// Arguments written on their own (after a family's markup): an object keeps
// the text the model wrote, anything else is read as arguments_text does.
std::string written_arguments(const std::string& raw) {
  const std::string t = trim(raw);
  const json v = json::parse(t, nullptr, false);
  if (!v.is_discarded() && v.is_object()) return t;
  return arguments_text(v.is_discarded() ? json(raw) : v);
}

// While streaming: a call whose name is known, its arguments so far being
// `raw` from the first '{' (none before it).
void partial_written(ParsedOutput& out, const std::string& name, const std::string& raw) {
  out.has_partial = true;
  out.partial.name = name;
  const size_t b = raw.find('{');
  out.partial.arguments = b == std::string::npos || !trim(raw.substr(0, b)).empty() ? "" : raw.substr(b);
}

// One call object in any of the families' spellings: {"name", "arguments"},
// {"name", "parameters"} (Llama 3), {"tool_name", "parameters"} (Command-R),
// {"function": {"name", "arguments"}} (OpenAI's own).
bool call_of(const json& v, ToolCall& call) {
  if (!v.is_object()) return false;
  if (v.contains("function") && v["function"].is_object()) return call_of(v["function"], call);
  const char* name_key = v.contains("name") ? "name" : v.contains("tool_name") ? "tool_name" : nullptr;
  if (!name_key || !v[name_key].is_string()) return false;
  call.name = v[name_key].get<std::string>();
  const char* args_key = v.contains("arguments") ? "arguments" : v.contains("parameters") ? "parameters" : nullptr;
  call.arguments = args_key ? arguments_text(v[args_key]) : "{}";
  return true;
}

// A JSON object or a list of them -> calls; false (and nothing added) if
// any element is not a call.
// An object's arguments keep the text the model wrote (a stream sends that
// text as it grows, so the whole call must say the same).
bool calls_of(const std::string& text, std::vector<ToolCall>& calls) {
  const json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return false;
  std::vector<size_t> starts;  // where each call object starts in text
  size_t at = skip_space(text, 0);
  if (at < text.size() && text[at] == '[') {
    for (at = skip_space(text, at + 1); at < text.size() && text[at] == '{';) {
      starts.push_back(at);
      at = skip_space(text, json_end(text, at));
      if (at < text.size() && text[at] == ',') at = skip_space(text, at + 1);
    }
  } else {
    starts.push_back(at);
  }
  std::vector<ToolCall> found;
  const json items = v.is_array() ? v : json::array({v});
  for (size_t k = 0; k < items.size(); ++k) {
    ToolCall c;
    if (!call_of(items[k], c)) return false;
    if (k < starts.size()) {
      std::pair<size_t, size_t> args = member_span(text, starts[k], "arguments");
      if (args.first == std::string::npos) args = member_span(text, starts[k], "parameters");
      if (args.first != std::string::npos && args.second != std::string::npos && text[args.first] == '{')
        c.arguments = text.substr(args.first, args.second - args.first);
    }
    found.push_back(std::move(c));
  }
  calls.insert(calls.end(), found.begin(), found.end());
  return !found.empty();
}

// How many characters at the end of text could be the start of marker.
size_t partial_marker(const std::string& text, const std::string& marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k)
    if (text.compare(text.size() - k, k, marker, 0, k) == 0) return k;
  return 0;
}

// Content up to `end`, less a tail that may be the start of `marker` when
// the text can still grow.
void add_content(ParsedOutput& out, const std::string& text, size_t end, bool final, const std::string& marker) {
  std::string piece = text.substr(0, end);
  if (!final && end == text.size()) piece.resize(piece.size() - partial_marker(piece, marker));
  out.content += piece;
}

// Calls written as <open> JSON <close>, any number of times, content around
// them (Hermes, Qwen, Granite, Command-R7B). close "": the JSON ends the call.
void read_tagged_json(const std::string& text, bool final, ParsedOutput& out, const std::string& open, const std::string& close) {
  size_t at = 0;
  while (true) {
    const size_t start = text.find(open, at);
    if (start == std::string::npos) {
      add_content(out, text.substr(at), text.size() - at, final, open);
      return;
    }
    out.content += text.substr(at, start - at);
    const size_t body = skip_space(text, start + open.size());
    const size_t end = body < text.size() && (text[body] == '{' || text[body] == '[') ? json_end(text, body) : std::string::npos;
    if (end == std::string::npos) {
      // Not (yet) a call: while streaming wait for more (saying what of the
      // call is known); at the end the block stays content, so nothing the
      // model wrote is lost.
      if (final) out.content += text.substr(start);
      else if (body < text.size()) partial_call(text, body, out);
      return;
    }
    size_t after = end;
    if (!close.empty()) {
      const size_t c = text.find(close, end);
      if (c != std::string::npos && trim(text.substr(end, c - end)).empty()) after = c + close.size();
      else if (!final) {  // the closing tag may still come
        partial_call(text, body, out);
        return;
      }
    }
    if (!calls_of(text.substr(body, end - body), out.calls)) out.content += text.substr(start, after - start);
    at = after;
  }
}

// ---- the families

void read_hermes(const std::string& text, bool final, ParsedOutput& out) { read_tagged_json(text, final, out, "<tool_call>", "</tool_call>"); }

void read_granite(const std::string& text, bool final, ParsedOutput& out) {
  if (text.find("<|tool_call|>") != std::string::npos || partial_marker(text, "<|tool_call|>") > 0)
    return read_tagged_json(text, final, out, "<|tool_call|>", "");
  read_tagged_json(text, final, out, "<tool_call>", "</tool_call>");  // Granite 3.3+
}

// Llama 3.x: the whole answer is one or more JSON calls ({"name",
// "parameters"}, separated by ';'), maybe after <|python_tag|>.
void read_llama3_json(const std::string& text, bool final, ParsedOutput& out) {
  const std::string tag = "<|python_tag|>";
  size_t at = skip_space(text, 0);
  if (text.compare(at, tag.size(), tag) == 0) at = skip_space(text, at + tag.size());
  if (at >= text.size()) {
    if (final) out.content = text;
    return;
  }
  if (text[at] != '{') return add_content(out, text, text.size(), final, tag);
  std::vector<ToolCall> calls;
  while (at < text.size()) {
    const size_t end = json_end(text, at);
    if (end == std::string::npos) {
      if (final) out.content = text;  // unfinished JSON: the model's text, not a call
      else if (partial_call(text, at, out)) out.calls = std::move(calls);
      return;
    }
    if (!calls_of(text.substr(at, end - at), calls)) {
      out.content = text;
      return;
    }
    at = skip_space(text, end);
    if (at < text.size() && text[at] == ';') at = skip_space(text, at + 1);
    if (at < text.size() && text[at] != '{') {
      out.content = text;  // JSON followed by prose: an answer, not calls
      return;
    }
  }
  out.calls = std::move(calls);
}

// Mistral: [TOOL_CALLS] then a JSON list (v3), or name[ARGS]{...} per call
// (v11+, each after its own [TOOL_CALLS]).
void read_mistral(const std::string& text, bool final, ParsedOutput& out) {
  const std::string mark = "[TOOL_CALLS]";
  const size_t first = text.find(mark);
  if (first == std::string::npos) return add_content(out, text, text.size(), final, mark);
  out.content = text.substr(0, first);
  size_t at = first;
  while (at < text.size()) {
    if (text.compare(at, mark.size(), mark) == 0) at = skip_space(text, at + mark.size());
    if (at >= text.size()) return;
    if (text[at] == '[' || text[at] == '{') {
      const size_t end = json_end(text, at);
      if (end == std::string::npos) {
        if (final) out.content += text.substr(at);
        else partial_call(text, at, out);
        return;
      }
      if (!calls_of(text.substr(at, end - at), out.calls)) out.content += text.substr(at, end - at);
      at = skip_space(text, end);
      continue;
    }
    // name[ARGS]{...} (or name[CALL_ID]id[ARGS]{...}, or name{...})
    const size_t brace = text.find('{', at);
    if (brace == std::string::npos) {
      if (final) out.content += text.substr(at);
      return;
    }
    std::string name = text.substr(at, brace - at);
    for (const std::string tag : {"[ARGS]", "[CALL_ID]"}) {
      const size_t t = name.find(tag);
      if (t != std::string::npos) name = name.substr(0, t);
    }
    const size_t end = json_end(text, brace);
    if (end == std::string::npos) {
      if (final) out.content += text.substr(at);
      else partial_written(out, trim(name), text.substr(brace));
      return;
    }
    out.calls.push_back({trim(name), written_arguments(text.substr(brace, end - brace))});
    at = skip_space(text, end);
  }
}

// DeepSeek V3 / R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
// ```json {...} ```<｜tool▁call▁end｜>; V3.1: NAME<｜tool▁sep｜>{...}.
void read_deepseek(const std::string& text, bool final, ParsedOutput& out) {
  const std::string calls_begin = "<｜tool▁calls▁begin｜>";
  const std::string call_begin = "<｜tool▁call▁begin｜>";
  const std::string call_end = "<｜tool▁call▁end｜>";
  const std::string sep = "<｜tool▁sep｜>";
  const size_t first = text.find(calls_begin);
  if (first == std::string::npos) return add_content(out, text, text.size(), final, calls_begin);
  out.content = text.substr(0, first);
  size_t at = first + calls_begin.size();
  while (true) {
    const size_t b = text.find(call_begin, at);
    if (b == std::string::npos) return;
    const size_t e = text.find(call_end, b);
    // Incomplete: wait, saying what is known of it (at the end, the
    // unfinished call is dropped).
    const bool complete = e != std::string::npos;
    if (!complete && final) return;
    std::string body = text.substr(b + call_begin.size(), complete ? e - b - call_begin.size() : std::string::npos);
    if (!complete) body.resize(body.size() - partial_marker(body, call_end));
    const size_t s = body.find(sep);
    if (s != std::string::npos) {
      std::string head = trim(body.substr(0, s)), rest = body.substr(s + sep.size());
      std::string name = head == "function" || head.empty() ? "" : head;
      if (name.empty()) {
        const size_t nl = rest.find('\n');
        if (nl == std::string::npos && !complete) return;  // the name's line is still being written
        name = trim(rest.substr(0, nl));
        rest = nl == std::string::npos ? "" : rest.substr(nl + 1);
      }
      const size_t j = rest.find('{');
      const size_t end = j == std::string::npos ? std::string::npos : json_end(rest, j);
      if (!complete) {
        if (!name.empty()) partial_written(out, name, j == std::string::npos ? "" : rest.substr(j, end == std::string::npos ? std::string::npos : end - j));
        return;
      }
      if (end != std::string::npos) out.calls.push_back({name, written_arguments(rest.substr(j, end - j))});
    }
    if (!complete) return;
    at = e + call_end.size();
  }
}

// Command-R+: Action: ```json [{"tool_name", "parameters"}] ```;
// Command-R7B: <|START_ACTION|>[...]<|END_ACTION|>, its reply between
// <|START_RESPONSE|> and <|END_RESPONSE|>, thinking in <|START_THINKING|>.
void read_command_r(const std::string& text, bool final, ParsedOutput& out) {
  std::string t = text;
  const std::string think_open = "<|START_THINKING|>", think_close = "<|END_THINKING|>";
  const size_t th = t.find(think_open);
  if (th != std::string::npos) {
    const size_t tc = t.find(think_close, th);
    out.has_reasoning = true;
    out.reasoning = trim(t.substr(th + think_open.size(), tc == std::string::npos ? std::string::npos : tc - th - think_open.size()));
    t = tc == std::string::npos ? "" : t.substr(0, th) + t.substr(tc + think_close.size());
  }
  for (const std::string tag : {"<|START_RESPONSE|>", "<|END_RESPONSE|>"})
    for (size_t p; (p = t.find(tag)) != std::string::npos;) t.erase(p, tag.size());
  if (t.find("<|START_ACTION|>") != std::string::npos || partial_marker(t, "<|START_ACTION|>") > 0)
    return read_tagged_json(t, final, out, "<|START_ACTION|>", "<|END_ACTION|>");
  const std::string action = "Action:";
  const size_t a = t.find(action);
  if (a == std::string::npos) return add_content(out, t, t.size(), final, action);
  const size_t j = t.find('[', a);
  const size_t end = j == std::string::npos ? std::string::npos : json_end(t, j);
  if (end == std::string::npos) {
    out.content = t.substr(0, a);
    if (final) out.content = t;
    return;
  }
  out.content = t.substr(0, a);
  if (!calls_of(t.substr(j, end - j), out.calls)) out.content = t;
}

// gpt-oss (OpenAI's harmony format): messages <|start|>assistant
// <|channel|>C [to=functions.NAME] [<|constrain|>json]<|message|>BODY
// ending in <|end|>, <|call|> or <|return|>. analysis is reasoning, final
// the answer, commentary with a recipient a call (without one, a preamble
// the user sees).
void read_gpt_oss(const std::string& text, bool final, ParsedOutput& out) {
  size_t at = 0;
  while (at < text.size()) {
    size_t start = text.find("<|start|>", at);
    // The first message's header begins the output (the prompt ends in <|start|>assistant).
    const size_t head = at == 0 ? 0 : (start == std::string::npos ? std::string::npos : start + 9);
    if (head == std::string::npos) return;
    const size_t msg = text.find("<|message|>", head);
    if (msg == std::string::npos) {
      if (at == 0 && final && text.find("<|channel|>") == std::string::npos) out.content = text;  // not harmony at all
      return;
    }
    const std::string header = text.substr(head, msg - head);
    size_t end = std::string::npos, next = std::string::npos;
    for (const std::string stop : {"<|end|>", "<|call|>", "<|return|>"}) {
      const size_t e = text.find(stop, msg);
      if (e < end) {
        end = e;
        next = e + stop.size();
      }
    }
    const bool complete = end != std::string::npos;
    std::string body = text.substr(msg + 11, complete ? end - msg - 11 : std::string::npos);
    if (!complete && !final)  // the end of an unfinished message may be the start of its end marker
      for (const std::string stop : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) body.resize(body.size() - partial_marker(body, stop));
    const size_t ch = header.find("<|channel|>");
    std::string channel = ch == std::string::npos ? "" : header.substr(ch + 11);
    channel = channel.substr(0, channel.find_first_of(" <"));
    const size_t to = header.find("to=functions.");
    if (to != std::string::npos) {
      std::string name = header.substr(to + 13);
      name = name.substr(0, name.find_first_of(" <"));
      if (!complete && !final) return partial_written(out, name, trim(body).empty() ? "" : body.substr(body.find_first_not_of(" \t\r\n")));
      out.calls.push_back({name, written_arguments(body)});
    } else if (channel == "analysis") {
      out.has_reasoning = true;
      out.reasoning += body;
    } else {
      out.content += body;
    }
    if (!complete) return;
    at = next;
  }
}

// How one call is written: `begin` (with {name} for the function's name),
// the arguments as a JSON object, `end`. `trigger`: where a call starts.
struct CallSyntax {
  const char* trigger;
  const char* begin;
  const char* end;
};

struct Family {
  const char* name;
  std::vector<std::string> marks;  // any of them in a template's source picks the family
  Reader read;
  CallSyntax call;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"gpt_oss", {"<|channel|>"}, read_gpt_oss,
       {"<|channel|>commentary to=functions.", "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>", "<|call|>"}},
      {"mistral", {"[TOOL_CALLS]"}, read_mistral, {"[TOOL_CALLS]", "[TOOL_CALLS][{\"name\": \"{name}\", \"arguments\": ", "}]"}},
      {"deepseek_v3", {"tool▁calls▁begin"}, read_deepseek,
       {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>", "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}},
      {"granite", {"<|tool_call|>", "start_of_role"}, read_granite,
       {"<tool_call>", "<tool_call>[{\"name\": \"{name}\", \"arguments\": ", "}]"}},
      {"command_r", {"<|START_ACTION|>", "<|START_OF_TURN_TOKEN|>"}, read_command_r,
       {"<|START_ACTION|>", "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"{name}\", \"parameters\": ", "}]<|END_ACTION|>"}},
      {"llama3_json", {"<|python_tag|>", "Environment: ipython"}, read_llama3_json,
       {"{\"name\": \"", "{\"name\": \"{name}\", \"parameters\": ", "}"}},
      {"hermes", {"<tool_call>"}, read_hermes, {"<tool_call>", "<tool_call>\n{\"name\": \"{name}\", \"arguments\": ", "}\n</tool_call>"}},
  };
  return table;
}

// <think>...</think> (DeepSeek-R1, Qwen3, SmolLM3): taken out before the
// family reads the rest. A template that opens <think> in the prompt leaves
// only the closing tag in the output.
std::string take_think(const std::string& text, bool final, ParsedOutput& out) {
  const std::string open = "<think>", close = "</think>";
  const size_t c = text.find(close);
  size_t o = text.find(open);
  if (c != std::string::npos && (o == std::string::npos || o > c)) o = std::string::npos;
  if (o == std::string::npos && c == std::string::npos) {
    if (final) return text;
    return text.substr(0, text.size() - partial_marker(text, open));  // "<thi" may become <think>
  }
  out.has_reasoning = true;
  const size_t from = o == std::string::npos ? 0 : o + open.size();
  if (c == std::string::npos) {
    out.reasoning = text.substr(from);
    if (!final) out.reasoning.resize(out.reasoning.size() - partial_marker(out.reasoning, close));
    return text.substr(0, o);
  }
  out.reasoning = text.substr(from, c - from);
  const std::string before = o == std::string::npos ? "" : text.substr(0, o);
  std::string after = text.substr(c + close.size());
  after.erase(0, skip_space(after, 0));
  return before + after;
}

}  // namespace

struct ToolCallFamily {
  const Family* family;
};

namespace {
const ToolCallFamily& row(size_t i) {
  static const std::vector<ToolCallFamily> rows = [] {
    std::vector<ToolCallFamily> r;
    for (const Family& f : families()) r.push_back({&f});
    return r;
  }();
  return rows[i];
}
}  // namespace

const ToolCallFamily& tool_call_family_for(const std::string& source) {
  for (size_t i = 0; i < families().size(); ++i)
    for (const std::string& mark : families()[i].marks)
      if (source.find(mark) != std::string::npos) return row(i);
  return tool_call_family_named("hermes");
}

const ToolCallFamily& tool_call_family_named(const std::string& name) {
  for (size_t i = 0; i < families().size(); ++i)
    if (name == families()[i].name) return row(i);
  std::string known;
  for (const Family& f : families()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw Error("unknown tool-call parser '" + name + "' (known: " + known + ")", ErrorKind::InvalidArgument);
}

const char* tool_call_family_name(const ToolCallFamily& family) { return family.family->name; }

std::string tool_call_constraint(const ToolCallFamily& family, const std::string& tools_json, bool one_call) {
  const json tools = json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) throw Error("tools: expected a JSON array", ErrorKind::InvalidArgument);
  const CallSyntax& syntax = family.family->call;
  json tags = json::array();
  for (const json& tool : tools) {
    const json& f = tool.contains("function") ? tool["function"] : tool;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      throw Error("tools: a tool without a function name: " + tool.dump(), ErrorKind::InvalidArgument);
    std::string begin = syntax.begin;
    begin.replace(begin.find("{name}"), 6, f["name"].get<std::string>());
    const json schema = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json{{"type", "object"}};
    tags.push_back({{"begin", begin}, {"schema", schema}, {"end", syntax.end}});
  }
  return json{{"triggers", json::array({syntax.trigger})}, {"tags", tags}, {"stop_after_first", one_call}}.dump();
}

std::vector<std::string> tool_call_family_names() {
  std::vector<std::string> names;
  for (const Family& f : families()) names.emplace_back(f.name);
  return names;
}

ParsedOutput parse_model_output(const ToolCallFamily& family, const std::string& text, bool final) {
  ParsedOutput out;
  const std::string rest = take_think(text, final, out);
  family.family->read(rest, final, out);
  return out;
}

}  // namespace sy
