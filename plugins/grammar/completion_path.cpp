#include "completion_path.h"

#include <algorithm>
#include <cstring>

namespace sy::grammar {

namespace {

constexpr size_t kLongRun = 6;

std::vector<uint8_t> byte_order() {
  std::vector<uint8_t> order;
  auto add = [&](const char* s) {
    for (; *s; ++s) order.push_back(static_cast<uint8_t>(*s));
  };
  add("\"}])");                        // closers end what is open
  add(",:.@_!#$%&'*+/;<=>?\\^`|~");    // separators and the rest of punctuation
  add("0123456789-");
  add("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
  add("{[(");                          // openers only when nothing else will do
  add(" \n\t\r");
  std::vector<bool> seen(256, false);
  for (uint8_t b : order) seen[b] = true;
  for (int b = 1; b < 256; ++b)
    if (!seen[static_cast<size_t>(b)]) order.push_back(static_cast<uint8_t>(b));
  return order;
}

}  // namespace

CompletionPath::CompletionPath(const std::vector<std::string>& tokens, std::vector<int32_t> stop_tokens)
    : tokens_(tokens), by_first_byte_(256), stop_tokens_(std::move(stop_tokens)), order_(byte_order()) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].empty()) by_first_byte_[static_cast<uint8_t>(tokens_[i][0])].push_back(static_cast<int32_t>(i));
  for (auto& ids : by_first_byte_)
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size(); });
}

int32_t CompletionPath::tokens_for(const std::string& completion, size_t from) const {
  int32_t n = 0;
  for (size_t i = from; i < completion.size(); ++n) {
    size_t step = 0;
    for (int32_t id : by_first_byte_[static_cast<uint8_t>(completion[i])]) {
      const std::string& t = tokens_[static_cast<size_t>(id)];
      if (t.size() <= completion.size() - i && std::memcmp(t.data(), completion.data() + i, t.size()) == 0) {
        step = t.size();  // the longest: the list is longest first
        break;
      }
    }
    if (step == 0) return -1;
    i += step;
  }
  return n;
}

std::optional<std::string> CompletionPath::complete(xgrammar::GrammarMatcher& m, size_t cap) const {
  std::string path;
  bool found = true;
  while (!m.IsCompleted()) {
    if (path.size() >= cap) {
      found = false;
      break;
    }
    // After a run of one byte (a repetition the grammar may allow forever:
    // "aaaa..."), any other byte first; shorter runs ("}}" closing nested
    // objects) are the closing order at work.
    size_t run = 0;
    while (run < path.size() && path[path.size() - 1 - run] == path.back()) ++run;
    const int last = run >= kLongRun ? static_cast<uint8_t>(path.back()) : -1;
    bool moved = false;
    for (int pass = 0; pass < 2 && !moved; ++pass)
      for (uint8_t b : order_) {
        if ((b == last) != (pass == 1)) continue;
        if (m.AcceptString(std::string(1, static_cast<char>(b)))) {
          path.push_back(static_cast<char>(b));
          moved = true;
          break;
        }
      }
    if (!moved) {
      found = false;
      break;
    }
  }
  if (!path.empty()) m.Rollback(static_cast<int>(path.size()));
  if (!found) return std::nullopt;
  return path;
}

bool CompletionPath::restrict_to(const std::string& completion, int32_t left, uint32_t* row, int32_t words) const {
  std::vector<uint32_t> kept(static_cast<size_t>(words), 0u);
  bool any = false;
  auto keep = [&](int32_t id) {
    const auto w = static_cast<size_t>(id) / 32;
    const uint32_t bit = 1u << (static_cast<uint32_t>(id) % 32);
    if (w < kept.size() && (row[w] & bit)) {
      kept[w] |= bit;
      any = true;
    }
  };
  if (completion.empty()) {
    for (int32_t id : stop_tokens_) keep(id);
  } else {
    int32_t longest = -1;
    for (int32_t id : by_first_byte_[static_cast<uint8_t>(completion[0])]) {
      const std::string& t = tokens_[static_cast<size_t>(id)];
      if (t.size() > completion.size() || std::memcmp(t.data(), completion.data(), t.size()) != 0) continue;
      if (longest < 0) longest = id;
      const int32_t rest = tokens_for(completion, t.size());
      if (rest >= 0 && rest <= left - 1) keep(id);
    }
    if (!any && longest >= 0) keep(longest);  // out of reach: the most progress
  }
  if (!any) return false;
  std::copy(kept.begin(), kept.end(), row);
  return true;
}

}  // namespace sy::grammar
