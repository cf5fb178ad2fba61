// The models of tokenizer.json: BPE (byte fallback, ignore_merges, merges as
// "a b" strings or ["a", "b"] pairs, subword prefix/suffix), Unigram
// (Viterbi over the pieces' log-probabilities), WordLevel and WordPiece.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "base/error.h"
#include "text/hf_components.h"
#include "text/unicode.h"

namespace sy::hf {

namespace u = sy::unicode;

namespace {

std::string byte_token(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

// Vocabulary in both directions.
struct Vocab {
  std::unordered_map<std::string, int> ids;
  std::vector<std::string> tokens;
  void add(const std::string& t, int id, const std::string& where) {
    // Real vocabularies stay far below 2^22 ids; the cap keeps a hostile
    // file from sizing the id table to gigabytes.
    SY_CHECK(id >= 0 && id < (1 << 22), where << ": token '" << t << "' has an invalid id " << id);
    ids[t] = id;
    if (static_cast<size_t>(id) >= tokens.size()) tokens.resize(static_cast<size_t>(id) + 1);
    tokens[static_cast<size_t>(id)] = t;
  }
  std::optional<int> find(const std::string& t) const {
    auto it = ids.find(t);
    return it == ids.end() ? std::nullopt : std::optional<int>(it->second);
  }
  std::string token(int id) const { return id >= 0 && static_cast<size_t>(id) < tokens.size() ? tokens[static_cast<size_t>(id)] : ""; }
};

Vocab vocab_from_object(const Json& j, const std::string& where) {
  SY_CHECK(j.is_object(), where << ": expected an object of token -> id");
  Vocab v;
  for (const auto& [t, id] : j.items()) {
    v.add(t, json_int(id, where + ": the id of '" + t + "'"), where);
  }
  return v;
}

std::optional<std::string> opt_str(const Json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<std::string>();
}

// ------------------------------------------------------------------ BPE

class Bpe : public Model {
 public:
  Bpe(const Json& j, const std::string& where) {
    vocab_ = vocab_from_object(j.at("vocab"), where + ".vocab");
    unk_ = opt_str(j, "unk_token");
    prefix_ = opt_str(j, "continuing_subword_prefix").value_or("");
    suffix_ = opt_str(j, "end_of_word_suffix").value_or("");
    fuse_unk_ = j.value("fuse_unk", false);
    byte_fallback_ = j.value("byte_fallback", false);
    ignore_merges_ = j.value("ignore_merges", false);
    SY_CHECK(!j.contains("dropout") || j.at("dropout").is_null() || j.at("dropout").get<double>() == 0.0,
             where << ": BPE dropout is a training-time setting; set it to null to use this tokenizer");
    if (unk_) {
      unk_id_ = vocab_.find(*unk_).value_or(-1);
      SY_CHECK(unk_id_ >= 0, where << ": unk_token '" << *unk_ << "' is not in the vocabulary");
    }
    const Json& merges = j.at("merges");
    SY_CHECK(merges.is_array(), where << ".merges: expected an array");
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string a, b;
      const Json& m = merges[r];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        SY_CHECK(sp != std::string::npos, where << ".merges[" << r << "]: '" << s << "' is not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        SY_CHECK(m.is_array() && m.size() == 2, where << ".merges[" << r << "]: expected \"a b\" or [\"a\", \"b\"]");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      auto ia = vocab_.find(a), ib = vocab_.find(b);
      SY_CHECK(ia && ib, where << ".merges[" << r << "]: '" << a << "' or '" << b << "' is not in the vocabulary");
      const std::string joined = a + (prefix_.empty() || b.rfind(prefix_, 0) != 0 ? b : b.substr(prefix_.size()));
      auto merged = vocab_.find(joined);
      SY_CHECK(merged, where << ".merges[" << r << "]: the merge '" << joined << "' is not in the vocabulary");
      merges_.emplace(key(*ia, *ib), std::make_pair(static_cast<int>(r), *merged));
    }
  }

  void tokenize(const std::string& word, std::vector<int>& out) const override {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (auto id = vocab_.find(word)) {
        out.push_back(*id);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int> ids = merge(word);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < 100000) cache_.emplace(word, std::move(ids));
  }
  std::optional<int> id(const std::string& t) const override { return vocab_.find(t); }
  std::string token(int i) const override { return vocab_.token(i); }
  int size() const override { return static_cast<int>(vocab_.tokens.size()); }
  std::string name() const override { return "BPE"; }

 private:
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  std::vector<int> merge(const std::string& word) const {
    // Initial symbols: one per character (or its bytes / unk).
    std::vector<int> sym;
    const auto cps = u::code_points(word);
    for (size_t i = 0; i < cps.size(); ++i) {
      const size_t b = cps[i].second, e = i + 1 < cps.size() ? cps[i + 1].second : word.size();
      std::string s = word.substr(b, e - b);
      if (i > 0 && !prefix_.empty()) s = prefix_ + s;
      if (i + 1 == cps.size() && !suffix_.empty()) s += suffix_;
      if (auto id = vocab_.find(s)) {
        sym.push_back(*id);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int> bytes;
        for (size_t k = b; k < e; ++k)
          if (auto id = vocab_.find(byte_token(static_cast<unsigned char>(word[k])))) bytes.push_back(*id);
        if (bytes.size() == e - b) {
          sym.insert(sym.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      if (unk_id_ >= 0) {
        if (!(fuse_unk_ && !sym.empty() && sym.back() == unk_id_)) sym.push_back(unk_id_);
      }
    }
    // Merges, lowest rank first (leftmost among equals), over a linked list.
    const size_t n = sym.size();
    std::vector<int> next(n), prev(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) {
      next[i] = static_cast<int>(i) + 1;
      prev[i] = static_cast<int>(i) - 1;
    }
    using Cand = std::tuple<int, int, int, int>;  // rank, left position, left id, right id
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int l) {
      if (l < 0 || static_cast<size_t>(next[static_cast<size_t>(l)]) >= n) return;
      const int r = next[static_cast<size_t>(l)];
      auto it = merges_.find(key(sym[static_cast<size_t>(l)], sym[static_cast<size_t>(r)]));
      if (it != merges_.end()) heap.emplace(it->second.first, l, sym[static_cast<size_t>(l)], sym[static_cast<size_t>(r)]);
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
    while (!heap.empty()) {
      auto [rank, l, a, b] = heap.top();
      heap.pop();
      const auto ul = static_cast<size_t>(l);
      if (!alive[ul] || sym[ul] != a) continue;
      const int r = next[ul];
      if (static_cast<size_t>(r) >= n || sym[static_cast<size_t>(r)] != b) continue;
      sym[ul] = merges_.at(key(a, b)).second;
      alive[static_cast<size_t>(r)] = false;
      next[ul] = next[static_cast<size_t>(r)];
      if (static_cast<size_t>(next[ul]) < n) prev[static_cast<size_t>(next[ul])] = l;
      push(prev[ul]);
      push(l);
    }
    std::vector<int> out;
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) out.push_back(sym[i]);
    return out;
  }

  Vocab vocab_;
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;  // (a, b) -> (rank, merged id)
  std::optional<std::string> unk_;
  int unk_id_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// ------------------------------------------------------------------ Unigram

class Unigram : public Model {
 public:
  Unigram(const Json& j, const std::string& where) {
    const Json& v = j.at("vocab");
    SY_CHECK(v.is_array(), where << ".vocab: expected [[piece, score], ...]");
    for (size_t i = 0; i < v.size(); ++i) {
      SY_CHECK(v[i].is_array() && v[i].size() == 2, where << ".vocab[" << i << "]: expected [piece, score]");
      SY_CHECK(v[i][0].is_string() && v[i][1].is_number(), where << ".vocab[" << i << "]: expected [string, number]");
      const std::string piece = v[i][0].get<std::string>();
      const double score = v[i][1].get<double>();
      vocab_.add(piece, static_cast<int>(i), where + ".vocab");
      scores_.push_back(score);
      min_score_ = std::min(min_score_, score);
      max_len_ = std::max(max_len_, piece.size());
    }
    if (j.contains("unk_id") && !j.at("unk_id").is_null()) {
      unk_id_ = json_int(j.at("unk_id"), where + ".unk_id");
      SY_CHECK(unk_id_ >= 0 && static_cast<size_t>(unk_id_) < scores_.size(), where << ".unk_id: out of range");
    }
    byte_fallback_ = j.value("byte_fallback", false);
  }

  void tokenize(const std::string& word, std::vector<int>& out) const override {
    if (word.empty()) return;
    const auto cps = u::code_points(word);
    const size_t n = word.size();
    std::vector<size_t> boundary;  // byte offsets of characters, then n
    for (const auto& c : cps) boundary.push_back(c.second);
    boundary.push_back(n);
    std::vector<char> is_boundary(n + 1, 0);
    for (size_t b : boundary) is_boundary[b] = 1;
    const double unk_score = min_score_ - 10.0;  // the library's unknown-piece penalty
    std::vector<double> best(n + 1, -std::numeric_limits<double>::infinity());
    std::vector<int> from_id(n + 1, -1);
    std::vector<size_t> from_pos(n + 1, 0);
    best[0] = 0;
    for (size_t k = 0; k + 1 < boundary.size(); ++k) {
      const size_t i = boundary[k];
      if (best[i] == -std::numeric_limits<double>::infinity()) continue;
      bool single_char = false;
      for (size_t len = 1; len <= max_len_ && i + len <= n; ++len) {
        if (!is_boundary[i + len]) continue;
        auto id = vocab_.find(word.substr(i, len));
        if (!id) continue;
        if (i + len == boundary[k + 1]) single_char = true;
        const double s = best[i] + scores_[static_cast<size_t>(*id)];
        if (s > best[i + len]) {
          best[i + len] = s;
          from_id[i + len] = *id;
          from_pos[i + len] = i;
        }
      }
      // A character no piece covers: unknown (or its bytes, later).
      if (!single_char) {
        const size_t e = boundary[k + 1];
        const double s = best[i] + unk_score;
        if (s > best[e]) {
          best[e] = s;
          from_id[e] = -2;
          from_pos[e] = i;
        }
      }
    }
    std::vector<std::pair<int, std::pair<size_t, size_t>>> path;  // id (-2 unknown), byte range
    for (size_t e = n; e > 0;) {
      const size_t b = from_pos[e];
      path.push_back({from_id[e], {b, e}});
      e = b;
    }
    std::reverse(path.begin(), path.end());
    bool last_unk = false;
    for (const auto& [id, range] : path) {
      if (id >= 0) {
        out.push_back(id);
        last_unk = false;
        continue;
      }
      if (byte_fallback_) {
        std::vector<int> bytes;
        for (size_t k = range.first; k < range.second; ++k)
          if (auto b = vocab_.find(byte_token(static_cast<unsigned char>(word[k])))) bytes.push_back(*b);
        if (bytes.size() == range.second - range.first) {
          out.insert(out.end(), bytes.begin(), bytes.end());
          last_unk = false;
          continue;
        }
      }
      SY_CHECK(unk_id_ >= 0, "Unigram: the text has a character no piece covers and the model has no unk_id");
      if (!last_unk) out.push_back(unk_id_);  // consecutive unknowns fuse
      last_unk = true;
    }
  }
  std::optional<int> id(const std::string& t) const override { return vocab_.find(t); }
  std::string token(int i) const override { return vocab_.token(i); }
  int size() const override { return static_cast<int>(vocab_.tokens.size()); }
  std::string name() const override { return "Unigram"; }

 private:
  Vocab vocab_;
  std::vector<double> scores_;
  double min_score_ = std::numeric_limits<double>::infinity();
  size_t max_len_ = 0;
  int unk_id_ = -1;
  bool byte_fallback_ = false;
};

// ------------------------------------------------------------------ WordLevel, WordPiece

class WordLevel : public Model {
 public:
  WordLevel(const Json& j, const std::string& where) {
    vocab_ = vocab_from_object(j.at("vocab"), where + ".vocab");
    if (auto unk = opt_str(j, "unk_token")) unk_id_ = vocab_.find(*unk).value_or(-1);
  }
  void tokenize(const std::string& word, std::vector<int>& out) const override {
    if (auto id = vocab_.find(word)) out.push_back(*id);
    else if (unk_id_ >= 0) out.push_back(unk_id_);
    else SY_THROW("WordLevel: '" << word << "' is not in the vocabulary and there is no unk_token");
  }
  std::optional<int> id(const std::string& t) const override { return vocab_.find(t); }
  std::string token(int i) const override { return vocab_.token(i); }
  int size() const override { return static_cast<int>(vocab_.tokens.size()); }
  std::string name() const override { return "WordLevel"; }

 private:
  Vocab vocab_;
  int unk_id_ = -1;
};

class WordPiece : public Model {
 public:
  WordPiece(const Json& j, const std::string& where) {
    vocab_ = vocab_from_object(j.at("vocab"), where + ".vocab");
    prefix_ = opt_str(j, "continuing_subword_prefix").value_or("##");
    max_chars_ = static_cast<size_t>(std::max(0, j.contains("max_input_chars_per_word") ? json_int(j.at("max_input_chars_per_word"), where + ".max_input_chars_per_word") : 100));
    auto unk = opt_str(j, "unk_token").value_or("[UNK]");
    unk_id_ = vocab_.find(unk).value_or(-1);
    SY_CHECK(unk_id_ >= 0, where << ": unk_token '" << unk << "' is not in the vocabulary");
  }
  void tokenize(const std::string& word, std::vector<int>& out) const override {
    const auto cps = u::code_points(word);
    if (cps.size() > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    std::vector<int> ids;
    size_t start = 0;
    while (start < cps.size()) {
      size_t end = cps.size();
      std::optional<int> found;
      while (start < end) {
        const size_t b = cps[start].second, e = end < cps.size() ? cps[end].second : word.size();
        std::string sub = word.substr(b, e - b);
        if (start > 0) sub = prefix_ + sub;
        if ((found = vocab_.find(sub))) break;
        --end;
      }
      if (!found) {
        out.push_back(unk_id_);
        return;
      }
      ids.push_back(*found);
      start = end;
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::optional<int> id(const std::string& t) const override { return vocab_.find(t); }
  std::string token(int i) const override { return vocab_.token(i); }
  int size() const override { return static_cast<int>(vocab_.tokens.size()); }
  std::string name() const override { return "WordPiece"; }

 private:
  Vocab vocab_;
  std::string prefix_;
  size_t max_chars_;
  int unk_id_;
};

}  // namespace

std::unique_ptr<Model> make_model(const Json& j, const std::string& where) {
  SY_CHECK(j.is_object(), where << ": expected an object");
  std::string type = j.value("type", "");
  if (type.empty()) {
    // Older files leave the type out: infer it from the fields.
    if (j.contains("merges")) type = "BPE";
    else if (j.contains("vocab") && j.at("vocab").is_array()) type = "Unigram";
    else if (j.contains("continuing_subword_prefix")) type = "WordPiece";
    else type = "WordLevel";
  }
  try {
    if (type == "BPE") return std::make_unique<Bpe>(j, where);
    if (type == "Unigram") return std::make_unique<Unigram>(j, where);
    if (type == "WordLevel") return std::make_unique<WordLevel>(j, where);
    if (type == "WordPiece") return std::make_unique<WordPiece>(j, where);
  } catch (const nlohmann::json::exception& e) {
    SY_THROW(where << ": malformed " << type << " model: " << e.what());
  }
  SY_THROW(where << ": model type '" << type << "' is not supported (supported: BPE, Unigram, WordLevel, WordPiece)");
}

}  // namespace sy::hf
