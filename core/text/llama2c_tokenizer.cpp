#include "text/llama2c_tokenizer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>

#include "base/error.h"

namespace sy {

Llama2cTokenizer Llama2cTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SY_CHECK_KIND(in, ErrorKind::NotFound, path << ": cannot open the tokenizer file");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_bytes(ss.str(), path);
}

Llama2cTokenizer Llama2cTokenizer::from_bytes(const std::string& bytes, const std::string& label) {
  Llama2cTokenizer t;
  size_t pos = 0;
  auto read = [&](void* dst, size_t n, const char* what) {
    SY_CHECK(pos + n <= bytes.size(), label << ": truncated tokenizer file (reading " << what << " of token "
                                            << t.pieces_.size() << " at byte " << pos << ")");
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
  };
  int32_t max_len = 0;
  read(&max_len, 4, "the header");
  SY_CHECK(max_len > 0 && max_len <= 1 << 16, label << ": not a llama2.c tokenizer (max token length " << max_len << ")");
  while (pos < bytes.size()) {
    float score;
    int32_t len;
    read(&score, 4, "the score");
    read(&len, 4, "the length");
    SY_CHECK(len >= 0 && len <= max_len * 4 + 16,
             label << ": token " << t.pieces_.size() << " has an invalid length " << len);
    std::string piece(static_cast<size_t>(len), '\0');
    read(piece.data(), static_cast<size_t>(len), "the bytes");
    t.ids_.emplace(piece, static_cast<int>(t.pieces_.size()));  // first occurrence wins
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
  }
  SY_CHECK(t.pieces_.size() > 3 + 256 - 1, label << ": tokenizer has only " << t.pieces_.size()
                                                 << " tokens; the llama2.c format needs the 256 byte tokens after id 2");
  return t;
}

int Llama2cTokenizer::lookup(const std::string& s) const {
  auto it = ids_.find(s);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Llama2cTokenizer::encode(const std::string& text, bool bos, bool eos) const {
  std::vector<int> tokens;
  if (bos) tokens.push_back(kBos);
  if (!text.empty()) {
    int space = lookup(" ");
    if (space >= 0) tokens.push_back(space);
  }
  // One token per UTF-8 character where the vocabulary has it, else bytes.
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t len = 1;
    if ((c & 0xE0) == 0xC0) len = 2;
    else if ((c & 0xF0) == 0xE0) len = 3;
    else if ((c & 0xF8) == 0xF0) len = 4;
    // Malformed sequences fall back to single bytes.
    if (i + len > text.size()) len = 1;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) len = 1;
    int id = lookup(text.substr(i, len));
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (size_t k = 0; k < len; ++k) tokens.push_back(static_cast<unsigned char>(text[i + k]) + 3);
    }
    i += len;
  }
  // BPE: repeatedly merge the adjacent pair whose merged piece scores
  // highest (the leftmost among equals), as run.c does. run.c rescans the
  // whole sequence per merge, O(n^2) - minutes for a long prompt. Here the
  // candidate pairs sit in a heap over a linked list of symbols; entries made
  // stale by a merge are skipped when popped. Same merges, same order.
  const size_t first = bos ? 1 : 0;
  const size_t n = tokens.size() - first;
  if (n >= 2) {
    struct Sym {
      int id, prev, next;
      uint32_t version;
    };
    std::vector<Sym> sym(n);
    for (size_t i = 0; i < n; ++i)
      sym[i] = {tokens[first + i], static_cast<int>(i) - 1, i + 1 < n ? static_cast<int>(i + 1) : -1, 0};
    struct Pair {
      float score;
      int left, right, merged;
      uint32_t vleft, vright;
    };
    auto worse = [](const Pair& a, const Pair& b) { return a.score != b.score ? a.score < b.score : a.left > b.left; };
    std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> heap(worse);
    std::string joined;
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      joined = pieces_[static_cast<size_t>(sym[static_cast<size_t>(l)].id)];
      joined += pieces_[static_cast<size_t>(sym[static_cast<size_t>(r)].id)];
      int id = lookup(joined);
      if (id < 0) return;
      float score = scores_[static_cast<size_t>(id)];
      if (!(score > -1e30f)) return;  // run.c never picks these (and NaN would break the heap order)
      heap.push({score, l, r, id, sym[static_cast<size_t>(l)].version, sym[static_cast<size_t>(r)].version});
    };
    for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int>(i), static_cast<int>(i + 1));
    std::vector<bool> alive(n, true);
    while (!heap.empty()) {
      Pair p = heap.top();
      heap.pop();
      Sym& l = sym[static_cast<size_t>(p.left)];
      if (!alive[static_cast<size_t>(p.left)] || !alive[static_cast<size_t>(p.right)] || l.next != p.right || l.version != p.vleft ||
          sym[static_cast<size_t>(p.right)].version != p.vright)
        continue;
      l.id = p.merged;
      ++l.version;
      alive[static_cast<size_t>(p.right)] = false;
      l.next = sym[static_cast<size_t>(p.right)].next;
      if (l.next >= 0) sym[static_cast<size_t>(l.next)].prev = p.left;
      consider(l.prev, p.left);
      consider(p.left, l.next);
    }
    tokens.resize(first);
    for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) tokens.push_back(sym[static_cast<size_t>(i)].id);
  }
  if (eos) tokens.push_back(kEos);
  return tokens;
}

std::string Llama2cTokenizer::decode_piece(int prev, int token) const {
  SY_CHECK(token >= 0 && token < vocab_size(), "token id " << token << " is outside the vocabulary (0.." << vocab_size() - 1 << ")");
  const std::string& p = pieces_[static_cast<size_t>(token)];
  std::string_view s = p;
  if (prev == kBos && !s.empty() && s[0] == ' ') s.remove_prefix(1);
  unsigned int byte = 0;
  if (s.size() == 6 && std::sscanf(std::string(s).c_str(), "<0x%02X>", &byte) == 1) return std::string(1, static_cast<char>(byte));
  return std::string(s);
}

std::string Llama2cTokenizer::decode(const std::vector<int>& tokens, int prev) const {
  std::string out;
  for (int t : tokens) {
    out += decode_piece(prev, t);
    prev = t;
  }
  return out;
}

}  // namespace sy
