#include "text/tokenizer.h"

#include <filesystem>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "text/gguf_vocab.h"
#include "text/hf_tokenizer.h"
#include "text/llama2c_tokenizer.h"

namespace sy {

namespace fs = std::filesystem;

namespace {

// llama2.c's tokenizer.bin behind the common interface: ids 0..2 (<unk>,
// BOS, EOS) are its special tokens; text after BOS drops the leading space.
class Llama2cAdapter : public Tokenizer {
 public:
  explicit Llama2cAdapter(Llama2cTokenizer t) : t_(std::move(t)) {}
  std::vector<int> encode(const std::string& text, bool add_special) const override { return t_.encode(text, add_special, false); }
  std::string decode(const std::vector<int>& ids, bool skip_special) const override {
    std::string out;
    int prev = Llama2cTokenizer::kBos;
    for (int id : ids) {
      if (!(skip_special && is_special(id))) out += t_.decode_piece(prev, id);
      prev = id;
    }
    return out;
  }
  int vocab_size() const override { return t_.vocab_size(); }
  std::optional<int> token_id(const std::string& token) const override {
    for (int i = 0; i < t_.vocab_size(); ++i)
      if (t_.piece(i) == token) return i;
    return std::nullopt;
  }
  std::string token(int id) const override { return id >= 0 && id < t_.vocab_size() ? t_.piece(id) : ""; }
  bool is_special(int id) const override { return id >= 0 && id <= Llama2cTokenizer::kEos; }
  // The piece as decoded after any token but BOS (its leading space kept).
  std::string token_bytes(int id) const override {
    if (id < 0 || id >= t_.vocab_size() || is_special(id)) return "";
    return t_.decode_piece(Llama2cTokenizer::kEos, id);
  }
  std::string kind() const override { return "llama2.c"; }

 private:
  Llama2cTokenizer t_;
};

bool ends_incomplete(const std::string& s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0; }

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const nlohmann::json* tokenizer_config, const std::string& config_name) {
  std::error_code ec;
  SY_CHECK_KIND(fs::is_regular_file(path, ec), ErrorKind::NotFound, path << ": no such tokenizer file");
  if (gguf::File::is_gguf(path)) return HfTokenizer::parse(gguf_tokenizer_for(path).tokenizer_json.dump(), path + " (tokenizer.ggml)");
  if (fs::path(path).extension() == ".json") return HfTokenizer::load(path, tokenizer_config, config_name);
  return std::make_unique<Llama2cAdapter>(Llama2cTokenizer::load(path));
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, const std::vector<int>& context, bool skip_special)
    : tok_(tok), ids_(context), skip_special_(skip_special) {
  read_ = ids_.size();
  prefix_ = read_ > 5 ? read_ - 5 : 0;
}

std::string StreamDecoder::push(int token) {
  ids_.push_back(token);
  const std::vector<int> before(ids_.begin() + static_cast<ptrdiff_t>(prefix_), ids_.begin() + static_cast<ptrdiff_t>(read_));
  const std::vector<int> now(ids_.begin() + static_cast<ptrdiff_t>(prefix_), ids_.end());
  const std::string prefix_text = tok_.decode(before, skip_special_);
  const std::string text = tok_.decode(now, skip_special_);
  // Hold back a character the next token may complete.
  if (text.size() <= prefix_text.size() || ends_incomplete(text)) return {};
  size_t common = 0;
  while (common < prefix_text.size() && text[common] == prefix_text[common]) ++common;
  prefix_ = read_;
  read_ = ids_.size();
  return text.substr(common);
}

std::string StreamDecoder::flush() {
  const std::vector<int> before(ids_.begin() + static_cast<ptrdiff_t>(prefix_), ids_.begin() + static_cast<ptrdiff_t>(read_));
  const std::vector<int> now(ids_.begin() + static_cast<ptrdiff_t>(prefix_), ids_.end());
  const std::string prefix_text = tok_.decode(before, skip_special_), text = tok_.decode(now, skip_special_);
  prefix_ = read_ = ids_.size();
  return text.size() > prefix_text.size() ? text.substr(prefix_text.size()) : std::string();
}

std::string decode_continuation(const Tokenizer& tok, const std::vector<int>& context, const std::vector<int>& tokens, bool skip_special) {
  StreamDecoder d(tok, context, skip_special);
  std::string out;
  for (int t : tokens) out += d.push(t);
  return out + d.flush();
}

}  // namespace sy
