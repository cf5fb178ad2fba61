// Structured output on xgrammar (Apache-2.0; the grammar engine vLLM, SGLang
// and TensorRT-LLM use) as a logits processor: JSON objects, JSON Schema,
// regular expressions and EBNF/GBNF grammars. The compiler keeps compiled
// grammars in its cache, keyed by the spec, so a schema seen before costs a
// lookup; each request gets its own matcher (the pushdown automaton's state
// after the tokens it has accepted).
#include <dlpack/dlpack.h>
#include <switchyard/plugin.hpp>
#include <xgrammar/xgrammar.h>

#include <unordered_map>

namespace {

using sy::plugin::Error;
using sy::plugin::Options;
using sy::plugin::Vocab;

xgrammar::TokenizerInfo tokenizer_info(const Vocab& v) {
  // The host hands each token's bytes already decoded: xgrammar's RAW
  // vocabulary type takes them as they are; special tokens are empty.
  std::vector<std::string> tokens(static_cast<size_t>(v.size()));
  for (int32_t id = 0; id < v.size(); ++id)
    if (!v.special(id)) tokens[static_cast<size_t>(id)] = v.bytes(id);
  return xgrammar::TokenizerInfo(tokens, xgrammar::VocabType::RAW, v.size(), v.stop_tokens(), false);
}

class GrammarProcessor {
 public:
  GrammarProcessor(const Vocab& vocab, const Options& o)
      : vocab_size_(vocab.size()),
        compiler_(tokenizer_info(vocab), static_cast<int>(o.get_int("compile_threads")), true,
                  o.get_int("cache_mb") * 1024 * 1024),
        any_whitespace_(o.get_bool("any_whitespace")) {
    if (vocab.stop_tokens().empty()) throw Error("the model has no end-of-sequence token to finish a constrained text with", SY_INVALID_ARGUMENT);
  }

  void begin(uint64_t seq, const std::string& kind, const std::string& spec) {
    xgrammar::CompiledGrammar g = compile(kind, spec);
    matchers_.erase(seq);
    matchers_.emplace(seq, xgrammar::GrammarMatcher(g));
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
    for (int32_t r = 0; r < rows; ++r) matcher(seqs[r]).FillNextTokenBitmask(&t, r);
  }

  bool accept(uint64_t seq, int32_t token) { return matcher(seq).AcceptToken(token); }
  void rollback(uint64_t seq, int32_t n) { matcher(seq).Rollback(n); }
  int32_t query(uint64_t seq) {
    xgrammar::GrammarMatcher& m = matcher(seq);
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
    } catch (const std::exception& e) {
      throw Error("xgrammar refused the " + kind + ": " + e.what(), SY_INVALID_ARGUMENT);
    }
    throw Error("unknown constraint kind '" + kind + "' (json_object, json_schema, regex, grammar)", SY_UNSUPPORTED);
  }
  xgrammar::GrammarMatcher& matcher(uint64_t seq) {
    auto it = matchers_.find(seq);
    if (it == matchers_.end()) throw Error("sequence " + std::to_string(seq) + " has no constraint (begin was not called)", SY_NOT_FOUND);
    return it->second;
  }

  int32_t vocab_size_;
  xgrammar::GrammarCompiler compiler_;
  bool any_whitespace_;
  std::unordered_map<uint64_t, xgrammar::GrammarMatcher> matchers_;
};

}  // namespace

SY_PLUGIN(b) {
  b.info("switchyard-grammar", "0.1.0", "structured output (JSON, JSON Schema, regex, EBNF) on xgrammar");
  b.logits_processor<GrammarProcessor>(
      "xgrammar", "0.1.0", "masks tokens outside a JSON schema, regex or EBNF grammar (xgrammar " "0.2.9" ")",
      {sy::plugin::option_int("cache_mb", "256", "compiled-grammar cache size (MiB)"),
       sy::plugin::option_int("compile_threads", "1", "threads compiling one grammar (1: on the calling thread, no pool)"),
       sy::plugin::option_bool("any_whitespace", "false",
                               "JSON with any whitespace between tokens (false: compact separators, no runs of spaces)")});
}
