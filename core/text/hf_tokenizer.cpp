#include "text/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "text/unicode.h"

namespace sy {

namespace u = sy::unicode;

namespace {

// transformers' Llama and Gemma tokenizer classes rebuild the post-processor
// from tokenizer_config.json's add_bos_token / add_eos_token when they load,
// whatever tokenizer.json says.
struct BosEosProcessor : hf::PostProcessor {
  std::optional<int> bos, eos;
  void process(std::vector<int>& ids) const override {
    if (bos) ids.insert(ids.begin(), *bos);
    if (eos) ids.push_back(*eos);
  }
};

std::optional<std::string> config_token(const hf::Json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const hf::Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path, const hf::Json* config_json, const std::string& config_name) {
  std::ifstream in(path, std::ios::binary);
  SY_CHECK_KIND(in, ErrorKind::NotFound, path << ": cannot open the tokenizer file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto tok = parse(ss.str(), path);
  if (config_json) {
    const hf::Json& config = *config_json;
    const std::string& config_path = config_name;
    const std::string cls = config.is_object() ? config.value("tokenizer_class", std::string()) : "";
    const bool rebuilds = cls.rfind("LlamaTokenizer", 0) == 0 || cls.rfind("GemmaTokenizer", 0) == 0 || cls.rfind("CodeLlamaTokenizer", 0) == 0;
    if (rebuilds && (config.contains("add_bos_token") || config.contains("add_eos_token"))) {
      auto post = std::make_unique<BosEosProcessor>();
      auto id_of = [&](const char* key) {
        auto text = config_token(config, key);
        SY_CHECK(text, config_path << ": " << key << " is needed with add_" << std::string(key).substr(0, 3) << "_token");
        auto id = tok->token_id(*text);
        SY_CHECK(id, config_path << ": " << key << " '" << *text << "' is not in " << path);
        return *id;
      };
      auto flag = [&](const char* key, bool fallback) { return config.contains(key) && config[key].is_boolean() ? config[key].get<bool>() : fallback; };
      if (flag("add_bos_token", true)) post->bos = id_of("bos_token");
      if (flag("add_eos_token", false)) post->eos = id_of("eos_token");
      tok->post_ = std::move(post);
    }
  }
  return tok;
}

std::unique_ptr<HfTokenizer> HfTokenizer::parse(const std::string& json_text, const std::string& label) {
  hf::Json j;
  try {
    j = hf::Json::parse(json_text);
  } catch (const std::exception& e) {
    SY_THROW(label << ": not valid JSON: " << e.what());
  }
  SY_CHECK(j.is_object() && j.contains("model"), label << ": not a tokenizer.json (no 'model')");
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  try {
    t->model_ = hf::make_model(j.at("model"), label + ": model");
    t->normalizer_ = hf::make_normalizer(j.value("normalizer", hf::Json()), label + ": normalizer");
    t->pre_tokenizer_ = hf::make_pre_tokenizer(j.value("pre_tokenizer", hf::Json()), label + ": pre_tokenizer");
    t->decoder_ = hf::make_decoder(j.value("decoder", hf::Json()), label + ": decoder");
    std::unordered_map<std::string, int> ids;
    if (j.contains("added_tokens")) {
      const auto& list = j.at("added_tokens");
      SY_CHECK(list.is_array(), label << ": added_tokens: expected an array");
      for (size_t i = 0; i < list.size(); ++i) {
        const auto& a = list[i];
        SY_CHECK(a.is_object() && a.contains("id") && a.contains("content"), label << ": added_tokens[" << i << "]: needs id and content");
        Added tok{hf::json_int(a.at("id"), label + ": added_tokens[" + std::to_string(i) + "].id"),           a.at("content").get<std::string>(), a.value("single_word", false),
                  a.value("lstrip", false),        a.value("rstrip", false),           a.value("normalized", !a.value("special", false)),
                  a.value("special", false)};
        SY_CHECK(tok.id >= 0 && !tok.content.empty(), label << ": added_tokens[" << i << "]: bad id or empty content");
        t->added_by_content_[tok.content] = tok.id;
        t->added_by_id_[tok.id] = t->added_.size();
        t->added_.push_back(tok);
      }
      // Leftmost-longest matching: try longer contents first.
      std::stable_sort(t->added_.begin(), t->added_.end(), [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
      t->added_by_id_.clear();
      for (size_t i = 0; i < t->added_.size(); ++i) {
        t->added_by_id_[t->added_[i].id] = i;
        t->added_by_first_byte_[static_cast<unsigned char>(t->added_[i].content[0])].push_back(i);
      }
    }
    for (const auto& a : t->added_) ids[a.content] = a.id;
    t->post_ = hf::make_post_processor(j.value("post_processor", hf::Json()), label + ": post_processor",
                                       [&] {
                                         // Template tokens may be model tokens too.
                                         std::unordered_map<std::string, int> all = ids;
                                         if (j.at("post_processor").is_object() && j.at("post_processor").contains("special_tokens"))
                                           for (const auto& [name, s] : j.at("post_processor").at("special_tokens").items())
                                             if (auto id = t->model_->id(name); id && !all.count(name)) all[name] = *id;
                                         return all;
                                       }());
  } catch (const nlohmann::json::exception& e) {
    SY_THROW(label << ": malformed tokenizer.json: " << e.what());
  }
  return t;
}

std::vector<HfTokenizer::Segment> HfTokenizer::split_added(const std::string& text, bool at_start, bool normalized) const {
  std::vector<Segment> out;
  auto plain = [&](size_t b, size_t e) {
    if (e > b) out.push_back({text.substr(b, e - b), -1, at_start && b == 0});
  };
  auto word_char_before = [&](size_t at) {
    if (at == 0) return false;
    size_t k = at - 1;
    while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
    return u::is_alphanumeric(u::code_points(text.substr(k, at - k))[0].first);
  };
  auto word_char_after = [&](size_t at) {
    return at < text.size() && u::is_alphanumeric(u::code_points(text.substr(at, 4))[0].first);
  };
  size_t done = 0, i = 0;
  while (i < text.size()) {
    const Added* hit = nullptr;
    for (size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const Added& a = added_[k];
      if (a.normalized != normalized || a.content.size() > text.size() - i) continue;
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      hit = &a;
      break;  // longest first
    }
    if (!hit) {
      i += static_cast<size_t>(u::sequence_length(static_cast<unsigned char>(text[i])));
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->single_word && (word_char_before(b) || word_char_after(e))) {
      i = e;
      continue;
    }
    if (hit->lstrip)
      while (b > done && u::is_whitespace(static_cast<unsigned char>(text[b - 1]))) --b;
    if (hit->rstrip)
      while (e < text.size() && u::is_whitespace(static_cast<unsigned char>(text[e]))) ++e;
    plain(done, b);
    out.push_back({text.substr(b, e - b), hit->id, at_start && b == 0});
    done = i = e;
  }
  plain(done, text.size());
  return out;
}

void HfTokenizer::encode_plain(const Segment& s, std::vector<int>& out) const {
  std::vector<hf::Piece> pieces{{s.text, s.at_start}};
  if (pre_tokenizer_) pieces = pre_tokenizer_->split(std::move(pieces));
  for (const auto& p : pieces) model_->tokenize(p.text, out);
}

std::vector<int> HfTokenizer::encode(const std::string& raw, bool add_special) const {
  const std::string text = u::valid_utf8(raw);
  std::vector<int> ids;
  for (const Segment& s : split_added(text, true, false)) {
    if (s.added >= 0) {
      ids.push_back(s.added);
      continue;
    }
    const std::string norm = normalizer_ ? normalizer_->normalize(s.text) : s.text;
    for (const Segment& n : split_added(norm, s.at_start, true)) {
      if (n.added >= 0) ids.push_back(n.added);
      else encode_plain(n, ids);
    }
  }
  if (add_special && post_) post_->process(ids);
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  for (int id : ids) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      if (skip_special && added_[it->second].special) continue;
      tokens.push_back(added_[it->second].content);
      continue;
    }
    std::string t = model_->token(id);
    if (!t.empty()) tokens.push_back(std::move(t));
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

int HfTokenizer::vocab_size() const {
  int n = model_->size();
  for (const auto& a : added_) n = std::max(n, a.id + 1);
  return n;
}

std::optional<int> HfTokenizer::token_id(const std::string& token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->id(token);
}

std::string HfTokenizer::token(int id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].content;
  return model_->token(id);
}

bool HfTokenizer::is_special(int id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

std::string HfTokenizer::token_bytes(int id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].special ? "" : added_[it->second].content;
  std::string t = model_->token(id);
  if (t.empty() || !decoder_) return t;
  return decoder_->token_bytes(t);
}

}  // namespace sy
