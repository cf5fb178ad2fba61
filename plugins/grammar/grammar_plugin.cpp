// Structured output on xgrammar (Apache-2.0; the grammar engine vLLM, SGLang
// and TensorRT-LLM use) as a logits processor: JSON objects, JSON Schema,
// regular expressions and EBNF/GBNF grammars. The compiler keeps compiled
// grammars in its cache, keyed by the spec, so a schema seen before costs a
// lookup; each request gets its own matcher (the pushdown automaton's state
// after the tokens it has accepted). With a token budget (ABI 1.6) the masks
// keep a whole match within reach of it (completion_path.h).
#include <dlpack/dlpack.h>
#include <switchyard/plugin.hpp>
#include <xgrammar/xgrammar.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "completion_path.h"

namespace {

using sy::plugin::Error;
using sy::plugin::Options;
using sy::plugin::Vocab;

// The host hands each token's bytes already decoded: xgrammar's RAW
// vocabulary type takes them as they are; special tokens are empty.
std::vector<std::string> token_bytes(const Vocab& v) {
  std::vector<std::string> tokens(static_cast<size_t>(v.size()));
  for (int32_t id = 0; id < v.size(); ++id)
    if (!v.special(id)) tokens[static_cast<size_t>(id)] = v.bytes(id);
  return tokens;
}

// The tokens as a triggered-tags constraint sees them: control tokens keep
// their text (a family's call marker is one in its own vocabulary:
// [TOOL_CALLS], <|channel|>), the stop tokens stay empty.
std::vector<std::string> tagged_token_bytes(const Vocab& v) {
  std::vector<std::string> tokens(static_cast<size_t>(v.size()));
  const std::vector<int32_t> stop = v.stop_tokens();
  for (int32_t id = 0; id < v.size(); ++id)
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) tokens[static_cast<size_t>(id)] = v.bytes(id);
  return tokens;
}

// Our triggered_tags spec (plugin.h) as xgrammar's structural tag.
std::string structural_tag(const std::string& spec) {
  const nlohmann::json j = nlohmann::json::parse(spec, nullptr, false);
  if (!j.is_object() || !j.contains("triggers") || !j["triggers"].is_array() || !j.contains("tags") || !j["tags"].is_array())
    throw Error("triggered_tags: expected {\"triggers\": [...], \"tags\": [...]}", SY_INVALID_ARGUMENT);
  nlohmann::json tags = nlohmann::json::array();
  for (const auto& t : j["tags"]) {
    if (!t.is_object() || !t.contains("begin") || !t["begin"].is_string() || !t.contains("end") || !t["end"].is_string())
      throw Error("triggered_tags: each tag needs 'begin' and 'end' strings", SY_INVALID_ARGUMENT);
    const nlohmann::json schema = t.contains("schema") ? t["schema"] : nlohmann::json{{"type", "object"}};
    tags.push_back({{"type", "tag"}, {"begin", t["begin"]}, {"content", {{"type", "json_schema"}, {"json_schema", schema}}}, {"end", t["end"]}});
  }
  nlohmann::json format = {{"type", "triggered_tags"}, {"triggers", j["triggers"]}, {"tags", tags}};
  if (j.value("stop_after_first", false)) format["stop_after_first"] = true;
  return nlohmann::json{{"type", "structural_tag"}, {"format", format}}.dump();
}

// Tokens left at which the masks start keeping the completion in reach:
// its length in tokens plus this headroom (a token that opens a structure
// lengthens the completion by a few tokens).
constexpr int32_t kHeadroom = 8;
// Completions are not looked for further than this many bytes ahead.
constexpr size_t kMaxCompletion = 512;

class GrammarProcessor {
 public:
  GrammarProcessor(const Vocab& vocab, const Options& o) : GrammarProcessor(vocab, o, token_bytes(vocab)) {}
  GrammarProcessor(const Vocab& vocab, const Options& o, const std::vector<std::string>& tokens)
      : vocab_size_(vocab.size()),
        threads_(static_cast<int>(o.get_int("compile_threads"))),
        cache_bytes_(o.get_int("cache_mb") * 1024 * 1024),
        stop_tokens_(vocab.stop_tokens()),
        tagged_tokens_(tagged_token_bytes(vocab)),
        compiler_(xgrammar::TokenizerInfo(tokens, xgrammar::VocabType::RAW, vocab.size(), vocab.stop_tokens(), false), threads_, true,
                  cache_bytes_),
        any_whitespace_(o.get_bool("any_whitespace")),
        finish_within_budget_(o.get_bool("finish_within_budget")),
        path_(tokens, vocab.stop_tokens()) {
    if (vocab.stop_tokens().empty()) throw Error("the model has no end-of-sequence token to finish a constrained text with", SY_INVALID_ARGUMENT);
  }

  void begin(uint64_t seq, const std::string& kind, const std::string& spec) {
    xgrammar::CompiledGrammar g = compile(kind, spec);
    matchers_.erase(seq);
    matchers_.emplace(seq, Constrained{xgrammar::GrammarMatcher(g)});
  }

  void set_token_budget(uint64_t seq, int32_t tokens) {
    Constrained& c = state(seq);
    c.budget = tokens;
    c.accepted = 0;
  }

  void fill_masks(const uint64_t* seqs, int32_t rows, uint32_t* mask, int32_t words) {
    if (words != xgrammar::GetBitmaskSize(vocab_size_)) throw Error("mask rows of " + std::to_string(words) + " words; the vocabulary needs " +
                                                                   std::to_string(xgrammar::GetBitmaskSize(vocab_size_)));
    int64_t shape[2] = {rows, words};
    DLTensor t{};
    t.data = mask;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    for (int32_t r = 0; r < rows; ++r) {
      Constrained& c = state(seqs[r]);
      c.matcher.FillNextTokenBitmask(&t, r);
      if (c.budget > 0 && finish_within_budget_) keep_in_reach(c, mask + static_cast<size_t>(r) * static_cast<size_t>(words), words);
    }
  }

  bool accept(uint64_t seq, int32_t token) {
    Constrained& c = state(seq);
    if (!c.matcher.AcceptToken(token)) return false;
    ++c.accepted;
    return true;
  }
  void rollback(uint64_t seq, int32_t n) {
    Constrained& c = state(seq);
    c.matcher.Rollback(n);
    c.accepted -= n;
  }
  int32_t query(uint64_t seq) {
    xgrammar::GrammarMatcher& m = state(seq).matcher;
    return (m.IsCompleted() ? SY_CONSTRAINT_COMPLETE : 0) | (m.IsTerminated() ? SY_CONSTRAINT_TERMINATED : 0);
  }
  void end(uint64_t seq) { matchers_.erase(seq); }

 private:
  xgrammar::CompiledGrammar compile(const std::string& kind, const std::string& spec) {
    try {
      if (kind == "json_object") return compiler_.CompileJSONSchema(R"({"type": "object"})", any_whitespace_, std::nullopt, std::nullopt, false);
      if (kind == "json_schema") return compiler_.CompileJSONSchema(spec, any_whitespace_);
      if (kind == "regex") return compiler_.CompileRegex(spec);
      if (kind == "grammar") return compiler_.CompileGrammar(spec, "root");
      if (kind == "triggered_tags") return tagged_compiler().CompileStructuralTag(structural_tag(spec));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("xgrammar refused the " + kind + ": " + e.what(), SY_INVALID_ARGUMENT);
    }
    throw Error("unknown constraint kind '" + kind + "' (json_object, json_schema, regex, grammar, triggered_tags)", SY_UNSUPPORTED);
  }
  // Built on first use: most sessions never see a triggered_tags request.
  xgrammar::GrammarCompiler& tagged_compiler() {
    if (!tagged_compiler_)
      tagged_compiler_.emplace(xgrammar::TokenizerInfo(tagged_tokens_, xgrammar::VocabType::RAW, vocab_size_, stop_tokens_, false), threads_, true,
                               cache_bytes_);
    return *tagged_compiler_;
  }
  // A request's matcher, and its token budget when the host gave one.
  struct Constrained {
    xgrammar::GrammarMatcher matcher;
    int32_t budget = 0;    // tokens it may emit from begin (0: no limit given)
    int32_t accepted = 0;  // tokens accepted since
    // The completion's length when last built, and when that was (tokens
    // accepted): while the limit is far off it is rebuilt every
    // kRefreshEvery tokens only.
    int32_t completion_tokens = -1, built_at = 0;
  };
  static constexpr int32_t kRefreshEvery = 32;

  // Near the budget, only tokens on a completing path (completion_path.h).
  void keep_in_reach(Constrained& c, uint32_t* row, int32_t words) {
    const int32_t left = c.budget - c.accepted;  // this token included
    if (left <= 0) return;
    const bool far = c.completion_tokens >= 0 && left > c.completion_tokens + kHeadroom + kRefreshEvery;
    if (far && c.accepted - c.built_at < kRefreshEvery) return;
    const std::optional<std::string> path = path_.complete(c.matcher, kMaxCompletion);
    const int32_t need = path ? path_.tokens_for(*path) : -1;
    c.completion_tokens = need >= 0 ? need : static_cast<int32_t>(kMaxCompletion);
    c.built_at = c.accepted;
    // A whole match already (free text around tool calls, a finished JSON
    // value): nothing to keep in reach.
    if (need <= 0 || need + kHeadroom < left) return;
    path_.restrict_to(*path, left, row, words);
  }

  Constrained& state(uint64_t seq) {
    auto it = matchers_.find(seq);
    if (it == matchers_.end()) throw Error("sequence " + std::to_string(seq) + " has no constraint (begin was not called)", SY_NOT_FOUND);
    return it->second;
  }

  int32_t vocab_size_;
  int threads_;
  int64_t cache_bytes_;
  std::vector<int32_t> stop_tokens_;
  std::vector<std::string> tagged_tokens_;
  xgrammar::GrammarCompiler compiler_;
  std::optional<xgrammar::GrammarCompiler> tagged_compiler_;
  bool any_whitespace_, finish_within_budget_;
  sy::grammar::CompletionPath path_;
  std::unordered_map<uint64_t, Constrained> matchers_;
};

}  // namespace

SY_PLUGIN(b) {
  b.info("switchyard-grammar", "0.1.0", "structured output (JSON, JSON Schema, regex, EBNF) on xgrammar");
  b.logits_processor<GrammarProcessor>(
      "xgrammar", "0.1.0", "masks tokens outside a JSON schema, regex or EBNF grammar (xgrammar " "0.2.9" ")",
      {sy::plugin::option_int("cache_mb", "256", "compiled-grammar cache size (MiB)"),
       sy::plugin::option_int("compile_threads", "1", "threads compiling one grammar (1: on the calling thread, no pool)"),
       sy::plugin::option_bool("any_whitespace", "false",
                               "JSON with any whitespace between tokens (false: compact separators, no runs of spaces)"),
       sy::plugin::option_bool("finish_within_budget", "true",
                               "near a request's token limit, allow only tokens on a completing path, so the text ends on a whole match")});
}
