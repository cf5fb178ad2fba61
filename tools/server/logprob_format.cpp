#include "logprob_format.h"

#include <cstdio>
#include <stdexcept>

#include "request_parsing.h"

namespace sy::server {

using json = nlohmann::json;

std::string TokenNames::bytes(int32_t token) const {
  char buf[256];
  int32_t n = 0;
  if (sy_token_bytes(engine_, token, buf, sizeof buf, &n) != SY_API_OK) return "";
  if (n <= static_cast<int32_t>(sizeof buf)) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n), '\0');
  sy_token_bytes(engine_, token, big.data(), n, &n);
  return big;
}

std::string TokenNames::name(int32_t token) const {
  if (as_ids_) return "token_id:" + std::to_string(token);
  const std::string b = bytes(token);
  if (valid_utf8(b)) return b;
  std::string out = "bytes:";
  char hex[8];
  for (unsigned char c : b) {
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
  }
  return out;
}

// A token is special when the text leaves it out: decoding it alone with
// and without skipping special tokens differs.
bool TokenNames::special(int32_t token) const {
  if (auto it = special_.find(token); it != special_.end()) return it->second;
  bool is = false;
  if (const sy_tokenizer* tok = sy_engine_tokenizer(engine_)) {
    char kept[256], skipped[256];
    int64_t n_kept = 0, n_skipped = 0;
    if (sy_tokenizer_decode(tok, &token, 1, 0, kept, sizeof kept, &n_kept) == SY_API_OK &&
        sy_tokenizer_decode(tok, &token, 1, 1, skipped, sizeof skipped, &n_skipped) == SY_API_OK)
      is = n_kept != n_skipped;
  }
  special_[token] = is;
  return is;
}

size_t TokenNames::text_chars(int32_t token) const { return special(token) ? 0 : utf8_chars(bytes(token)); }

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    if (n == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return false;  // overlong, surrogate
    }
    if (n == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) return false;
    }
    i += n;
  }
  return true;
}

size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

namespace {
json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}
}  // namespace

json chat_logprob(const TokenNames& names, int32_t token, const Logprobs& lp) {
  json top = json::array();
  for (const auto& [t, v] : lp.top) top.push_back({{"token", names.name(t)}, {"logprob", v}, {"bytes", bytes_json(names.bytes(t))}});
  return {{"token", names.name(token)}, {"logprob", lp.logprob}, {"bytes", bytes_json(names.bytes(token))}, {"top_logprobs", top}};
}

void CompletionLogprobs::add(const TokenNames& names, int32_t token, const std::optional<Logprobs>& lp, std::optional<size_t> chars) {
  tokens_.push_back(names.name(token));
  offsets_.push_back(offset_);
  offset_ += chars ? *chars : names.text_chars(token);
  if (!lp) {
    logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
    return;
  }
  logprobs_.push_back(lp->logprob);
  // The chosen token is always among them (OpenAI: up to logprobs + 1).
  json top = json::object();
  for (const auto& [t, v] : lp->top) top[names.name(t)] = v;
  top[names.name(token)] = lp->logprob;
  top_.push_back(top);
}

json CompletionLogprobs::to_json() const {
  return {{"tokens", tokens_}, {"token_logprobs", logprobs_}, {"top_logprobs", top_}, {"text_offset", offsets_}};
}

json prompt_logprob_entry(const TokenNames& names, int32_t token, float logprob, int32_t rank, const std::vector<std::pair<int32_t, float>>& top) {
  json e = json::object();
  e[std::to_string(token)] = {{"logprob", logprob}, {"rank", rank}, {"decoded_token", names.name(token)}};
  for (size_t j = 0; j < top.size(); ++j) {
    const std::string key = std::to_string(top[j].first);
    if (!e.contains(key)) e[key] = {{"logprob", top[j].second}, {"rank", j + 1}, {"decoded_token", names.name(top[j].first)}};
  }
  return e;
}

PromptLogprobs prompt_logprobs(sy_engine* engine, const std::vector<int32_t>& prompt, int top) {
  PromptLogprobs out;
  if (prompt.size() < 2) return out;
  const size_t n = prompt.size() - 1, k = static_cast<size_t>(top);
  std::vector<float> lps(n), top_lps(n * k);
  std::vector<int32_t> ranks(n), top_ids(n * k);
  if (sy_prompt_logprobs(engine, prompt.data(), static_cast<int32_t>(prompt.size()), top, lps.data(), ranks.data(), top_ids.data(),
                         top_lps.data()) != SY_API_OK)
    throw ApiError{500, std::string("prompt logprobs: ") + sy_last_error(), "server_error", "", ""};
  for (size_t i = 0; i < n; ++i) {
    Logprobs l;
    l.logprob = lps[i];
    for (size_t j = 0; j < k; ++j)
      if (top_ids[i * k + j] >= 0) l.top.emplace_back(top_ids[i * k + j], top_lps[i * k + j]);
    out.positions.push_back(std::move(l));
  }
  out.ranks = std::move(ranks);
  return out;
}

}  // namespace sy::server
