#include "text/gguf_vocab.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "text/unicode.h"

namespace sy {

namespace {

using OJson = nlohmann::ordered_json;

// llama.cpp's token types.
enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };


OJson byte_level(bool use_regex) {
  return OJson{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

OJson split_then_bytes(const std::string& regex) {
  return OJson{{"type", "Sequence"},
               {"pretokenizers",
                OJson::array({OJson{{"type", "Split"}, {"pattern", OJson{{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                              byte_level(false)})}};
}

OJson digits_then_bytes() {
  return OJson{{"type", "Sequence"},
               {"pretokenizers", OJson::array({OJson{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
}

// tokenizer.ggml.pre -> the pre-tokenizer that splits text as llama.cpp's
// regexes for that name do. One entry per family.
struct PreTokenizer {
  std::vector<const char*> names;
  OJson (*make)();
};
const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      {{"default", "gpt-2", "gpt2", "olmo", "mpt", "phi-2", "jina-v2-en"}, [] { return byte_level(true); }},
      {{"smollm", "starcoder", "refact", "codeshell"}, [] { return digits_then_bytes(); }},
      // Llama 3 and the cl100k family: digits in runs of up to three.
      {{"llama-bpe", "llama3", "dbrx", "smaug-bpe"},
       [] {
         return split_then_bytes(
             "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
       }},
      // Qwen 2/2.5/3: single digits.
      {{"qwen2", "qwen35", "deepseek-r1-qwen", "megrez", "hunyuan"},
       [] {
         return split_then_bytes(
             "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
       }},
      // Mistral's tekken.
      {{"tekken"},
       [] {
         return split_then_bytes(
             "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}"
             "\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
       }},
      // o200k (GPT-4o, gpt-oss).
      {{"gpt-4o", "gpt-oss", "llama4"},
       [] {
         return split_then_bytes(
             "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n"
             "\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?"
             "[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
       }},
  };
  return table;
}

OJson pre_tokenizer_for(const std::string& pre, const std::string& label) {
  for (const PreTokenizer& p : pre_tokenizers())
    for (const char* n : p.names)
      if (pre == n) return p.make();
  std::ostringstream os;
  os << label << ": tokenizer.ggml.pre '" << pre << "' is not supported (supported:";
  for (const PreTokenizer& p : pre_tokenizers())
    for (const char* n : p.names) os << " " << n;
  os << ")";
  throw Error(os.str(), ErrorKind::Unsupported);
}

// SentencePiece-style merges: every split of a vocabulary piece into two
// pieces that are themselves in the vocabulary, ranked by the merged
// piece's score (highest first), which is the order llama.cpp's SPM
// tokenizer merges in. Splits fall on UTF-8 character boundaries.
OJson spm_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores, const std::vector<int64_t>& types) {
  std::unordered_map<std::string, size_t> id;
  for (size_t i = 0; i < tokens.size(); ++i) id[tokens[i]] = i;
  struct Merge {
    double score;
    size_t merged;
    size_t split;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!types.empty() && types[i] != kNormal && types[i] != kUserDefined) continue;
    const std::string& t = tokens[i];
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;
      auto a = id.find(t.substr(0, k)), b = id.find(t.substr(k));
      if (a == id.end() || b == id.end()) continue;
      merges.push_back({scores.empty() ? -static_cast<double>(i) : scores[i], i, k});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) { return x.score > y.score; });
  OJson out = OJson::array();
  for (const Merge& m : merges) out.push_back(OJson::array({tokens[m.merged].substr(0, m.split), tokens[m.merged].substr(m.split)}));
  return out;
}

}  // namespace

GgufTokenizerConfig gguf_tokenizer(const gguf::File& f) {
  const std::string& label = f.label();
  GgufTokenizerConfig c;
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  SY_CHECK_KIND(model == "gpt2" || model == "llama", ErrorKind::Unsupported,
                label << ": tokenizer.ggml.model '" << model << "' is not supported (gpt2: byte-level BPE, llama: SentencePiece-style)");
  auto tokens = f.get_strings("tokenizer.ggml.tokens");
  SY_CHECK(tokens && !tokens->empty(), label << ": metadata 'tokenizer.ggml.tokens' is missing");
  // tokenizer.json holds text: a piece that is not UTF-8 cannot be written
  // (byte pieces are <0xNN> tokens or the byte-level alphabet, both text).
  for (size_t i = 0; i < tokens->size(); ++i)
    SY_CHECK_KIND(unicode::is_valid_utf8((*tokens)[i]), ErrorKind::Unsupported,
                  label << ": tokenizer.ggml.tokens[" << i << "] is not valid UTF-8");
  const auto types = f.get_ints("tokenizer.ggml.token_type").value_or(std::vector<int64_t>{});
  SY_CHECK(types.empty() || types.size() == tokens->size(),
           label << ": tokenizer.ggml.token_type has " << types.size() << " entries for " << tokens->size() << " tokens");
  auto token_id = [&](const char* key) -> std::optional<int> {
    auto v = f.get_int(key);
    if (!v || *v < 0) return std::nullopt;  // llama.cpp writes -1 (as uint32) for none
    SY_CHECK(*v < static_cast<int64_t>(tokens->size()), label << ": metadata '" << key << "' = " << *v << " is outside the vocabulary");
    return static_cast<int>(*v);
  };
  c.bos_id = token_id("tokenizer.ggml.bos_token_id");
  c.eos_id = token_id("tokenizer.ggml.eos_token_id");
  c.eot_id = token_id("tokenizer.ggml.eot_token_id");
  c.eom_id = token_id("tokenizer.ggml.eom_token_id");
  const std::optional<int> unk_id = token_id("tokenizer.ggml.unknown_token_id");
  if (c.bos_id) c.bos_token = (*tokens)[static_cast<size_t>(*c.bos_id)];
  if (c.eos_id) c.eos_token = (*tokens)[static_cast<size_t>(*c.eos_id)];
  const bool spm = model == "llama";
  c.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  c.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  SY_CHECK(!c.add_bos || c.bos_id, label << ": tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
  SY_CHECK(!c.add_eos || c.eos_id, label << ": tokenizer.ggml.add_eos_token is set but there is no eos_token_id");
  c.chat_template = f.get_string("tokenizer.chat_template");
  SY_CHECK(!c.chat_template || unicode::is_valid_utf8(*c.chat_template), label << ": tokenizer.chat_template is not valid UTF-8");

  // Appended in id order without the ordered map's lookup per key (which
  // made this quadratic: seconds for a 50k vocabulary). A duplicate token
  // keeps its last id, as parsing tokenizer.json would.
  OJson vocab = OJson::object();
  auto& entries = static_cast<std::vector<std::pair<const std::string, OJson>>&>(vocab.get_ref<OJson::object_t&>());
  entries.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) entries.emplace_back((*tokens)[i], i);
  OJson added = OJson::array();
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != kControl && types[i] != kUserDefined) continue;
    if ((*tokens)[i].empty()) continue;
    const bool special = types[i] == kControl;
    added.push_back(OJson{{"id", i}, {"content", (*tokens)[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                          {"normalized", false}, {"special", special}});
  }
  OJson j = OJson::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  if (spm) {
    const bool prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    const auto scores = f.get_floats("tokenizer.ggml.scores").value_or(std::vector<double>{});
    SY_CHECK(scores.empty() || scores.size() == tokens->size(),
             label << ": tokenizer.ggml.scores has " << scores.size() << " entries for " << tokens->size() << " tokens");
    OJson norm = OJson::array();
    if (prefix) norm.push_back(OJson{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    norm.push_back(OJson{{"type", "Replace"}, {"pattern", OJson{{"String", " "}}}, {"content", "\xE2\x96\x81"}});
    j["normalizer"] = OJson{{"type", "Sequence"}, {"normalizers", norm}};
    j["pre_tokenizer"] = nullptr;
    j["model"] = OJson{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk_id ? OJson((*tokens)[static_cast<size_t>(*unk_id)]) : OJson()},
                       {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                       {"byte_fallback", true}, {"ignore_merges", false}, {"vocab", vocab},
                       {"merges", spm_merges(*tokens, scores, types)}};
    OJson dec = OJson::array({OJson{{"type", "Replace"}, {"pattern", OJson{{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                              OJson{{"type", "ByteFallback"}}, OJson{{"type", "Fuse"}}});
    if (prefix) dec.push_back(OJson{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = OJson{{"type", "Sequence"}, {"decoders", dec}};
  } else {
    auto merges = f.get_strings("tokenizer.ggml.merges");
    SY_CHECK(merges, label << ": metadata 'tokenizer.ggml.merges' is missing (a gpt2 tokenizer needs its merges)");
    for (size_t i = 0; i < merges->size(); ++i)
      SY_CHECK_KIND(unicode::is_valid_utf8((*merges)[i]), ErrorKind::Unsupported,
                    label << ": tokenizer.ggml.merges[" << i << "] is not valid UTF-8");
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = pre_tokenizer_for(f.get_string("tokenizer.ggml.pre").value_or("default"), label);
    j["model"] = OJson{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                       {"vocab", vocab}, {"merges", *merges}};
    j["decoder"] = OJson{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  // BOS/EOS as llama.cpp adds them.
  OJson single = OJson::array(), specials = OJson::object();
  auto special_item = [&](int id) {
    const std::string& t = (*tokens)[static_cast<size_t>(id)];
    single.push_back(OJson{{"SpecialToken", OJson{{"id", t}, {"type_id", 0}}}});
    specials[t] = OJson{{"id", t}, {"ids", OJson::array({id})}, {"tokens", OJson::array({t})}};
  };
  if (c.add_bos) special_item(*c.bos_id);
  single.push_back(OJson{{"Sequence", OJson{{"id", "A"}, {"type_id", 0}}}});
  if (c.add_eos) special_item(*c.eos_id);
  j["post_processor"] = c.add_bos || c.add_eos ? OJson{{"type", "TemplateProcessing"}, {"single", single}, {"pair", single},
                                                        {"special_tokens", specials}}
                                               : OJson();
  c.tokenizer_json = std::move(j);
  return c;
}

nlohmann::ordered_json GgufTokenizerConfig::tokenizer_config() const {
  OJson j = OJson::object();
  j["add_bos_token"] = add_bos;
  j["add_eos_token"] = add_eos;
  if (!bos_token.empty()) j["bos_token"] = bos_token;
  if (!eos_token.empty()) j["eos_token"] = eos_token;
  if (chat_template) j["chat_template"] = *chat_template;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  return j;
}

const GgufTokenizerConfig& gguf_tokenizer_for(const std::string& path) {
  static std::mutex mu;  // guards `cache`
  static std::map<std::string, std::unique_ptr<GgufTokenizerConfig>> cache;
  std::error_code ec;
  const auto stamp = std::filesystem::last_write_time(path, ec);
  const std::string key = std::filesystem::absolute(path, ec).string() + "@" +
                          std::to_string(stamp.time_since_epoch().count()) + ":" + std::to_string(std::filesystem::file_size(path, ec));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, std::make_unique<GgufTokenizerConfig>(gguf_tokenizer(gguf::File::open(path)))).first;
  return *it->second;
}

}  // namespace sy
