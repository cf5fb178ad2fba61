#include "model/model_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "text/gguf_vocab.h"

namespace sy {

namespace fs = std::filesystem;

namespace {

std::vector<int> int_or_list(const nlohmann::json& j) {
  std::vector<int> out;
  if (j.is_number_integer()) out.push_back(j.get<int>());
  else if (j.is_array())
    for (const auto& e : j)
      if (e.is_number_integer()) out.push_back(e.get<int>());
  return out;
}

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && gguf::File::is_gguf(path);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  SY_CHECK_KIND(in, ErrorKind::NotFound, "cannot read " << p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A configuration file (config.json, generation_config.json, ...).
nlohmann::json read_config(const fs::path& p) {
  try {
    return nlohmann::json::parse(read_text(p));
  } catch (const nlohmann::json::exception& e) {
    SY_THROW(p.string() << ": not valid JSON: " << e.what());
  }
}

OrderedJson read_json(const fs::path& p) {
  try {
    return OrderedJson::parse(read_text(p));
  } catch (const OrderedJson::exception& e) {
    SY_THROW(p.string() << ": not valid JSON: " << e.what());
  }
}

std::optional<GenaiConfig> read_genai_config(const std::string& dir) {
  fs::path p = fs::path(dir) / "genai_config.json";
  if (!fs::exists(p)) return std::nullopt;
  const nlohmann::json j = read_config(p);
  SY_CHECK(j.contains("model") && j["model"].is_object(), p.string() << ": no 'model' object");
  const auto& m = j["model"];
  GenaiConfig c;
  auto num = [&](const nlohmann::json& o, const char* key, int64_t& out) {
    if (o.contains(key)) {
      SY_CHECK(o[key].is_number_integer(), p.string() << ": '" << key << "' is not an integer");
      out = o[key].get<int64_t>();
    }
  };
  num(m, "context_length", c.context_length);
  num(m, "vocab_size", c.vocab_size);
  if (m.contains("eos_token_id")) c.eos_ids = int_or_list(m["eos_token_id"]);
  if (m.contains("bos_token_id") && m["bos_token_id"].is_number_integer()) c.bos_id = m["bos_token_id"].get<int>();
  if (m.contains("pad_token_id") && m["pad_token_id"].is_number_integer()) c.pad_id = m["pad_token_id"].get<int>();
  if (m.contains("decoder") && m["decoder"].is_object()) {
    const auto& d = m["decoder"];
    num(d, "head_size", c.head_size);
    num(d, "num_key_value_heads", c.kv_heads);
    num(d, "num_hidden_layers", c.num_layers);
    if (d.contains("filename") && d["filename"].is_string()) c.filename = d["filename"].get<std::string>();
    for (const char* section : {"inputs", "outputs"})
      if (d.contains(section) && d[section].is_object())
        for (const auto& [k, v] : d[section].items())
          if (v.is_string()) (std::string(section) == "inputs" ? c.inputs : c.outputs)[k] = v.get<std::string>();
  }
  return c;
}

// tokenizer_config.json's eos_token (a string or an AddedToken object),
// looked up in tokenizer.json's added tokens and vocabulary.
std::optional<int> tokenizer_config_eos_id(const fs::path& dir) {
  const fs::path config_path = dir / "tokenizer_config.json", tokenizer_path = dir / "tokenizer.json";
  if (!fs::exists(config_path) || !fs::exists(tokenizer_path)) return std::nullopt;
  try {
    std::ifstream cf(config_path), tf(tokenizer_path);
    const nlohmann::json config = nlohmann::json::parse(cf), tok = nlohmann::json::parse(tf);
    if (!config.contains("eos_token")) return std::nullopt;
    const nlohmann::json& e = config["eos_token"];
    const std::string text = e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", std::string()) : std::string();
    if (text.empty()) return std::nullopt;
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
      for (const auto& a : tok["added_tokens"])
        if (a.is_object() && a.value("content", std::string()) == text && a.contains("id") && a["id"].is_number_integer()) return a["id"].get<int>();
    if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object() && tok["model"]["vocab"].contains(text) &&
        tok["model"]["vocab"][text].is_number_integer())
      return tok["model"]["vocab"][text].get<int>();
  } catch (const std::exception& e) {
    SY_THROW(dir.string() << ": cannot read the eos token from tokenizer_config.json / tokenizer.json: " << e.what());
  }
  return std::nullopt;
}

std::string resolve_model_file(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  if (auto cfg = read_genai_config(path); cfg && !cfg->filename.empty()) return (fs::path(path) / cfg->filename).string();
  if (fs::exists(fs::path(path) / "model.onnx")) return (fs::path(path) / "model.onnx").string();
  std::vector<std::string> found, gguf;
  for (const auto& e : fs::directory_iterator(path)) {
    if (e.path().extension() == ".onnx") found.push_back(e.path().string());
    if (e.path().extension() == ".gguf") gguf.push_back(e.path().string());
  }
  if (found.empty() && gguf.size() == 1) return gguf[0];
  SY_CHECK(found.size() == 1, path << ": a model folder needs model.onnx, one *.onnx file, genai_config.json naming it, or one "
                                      "*.gguf file ("
                                   << found.size() << " .onnx and " << gguf.size() << " .gguf files found)");
  return found[0];
}

// llama2.c's tokenizer beside a model: tokenizer.bin, else the only tok*.bin.
std::string llama2c_tokenizer_in(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "tokenizer.bin", ec)) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("tok", 0) == 0 && e.path().extension() == ".bin") found.push_back(e.path());
  }
  return found.size() == 1 ? found[0].string() : std::string();
}

// The tokenizer a folder holds: tokenizer.json, else llama2.c's; "" when none.
std::string tokenizer_in(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "tokenizer.json", ec)) return (dir / "tokenizer.json").string();
  return llama2c_tokenizer_in(dir);
}

// The chat template of a folder: chat_template.jinja or chat_template.json
// (newer exports), else tokenizer_config.json's; special tokens from
// tokenizer_config.json and special_tokens_map.json.
std::optional<ChatTemplate> folder_chat_template(const fs::path& dir) {
  OrderedJson special = OrderedJson::object();
  std::optional<OrderedJson> value;
  std::string origin;
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const OrderedJson config = read_json(config_path);
    collect_special_tokens(config, special);
    if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
      value = config["chat_template"];
      origin = config_path.string();
    }
  }
  if (fs::exists(dir / "special_tokens_map.json")) collect_special_tokens(read_json(dir / "special_tokens_map.json"), special);
  if (fs::exists(dir / "chat_template.jinja")) {
    origin = (dir / "chat_template.jinja").string();
    return ChatTemplate::from_source(read_text(origin), origin, special);
  }
  if (fs::exists(dir / "chat_template.json")) {
    origin = (dir / "chat_template.json").string();
    const OrderedJson j = read_json(origin);
    SY_CHECK(j.is_object() && j.contains("chat_template"), origin << ": no 'chat_template' field");
    value = j["chat_template"];
  }
  if (!value || (value->is_array() && value->empty()) || (value->is_string() && value->get<std::string>().empty())) return std::nullopt;
  return ChatTemplate::from_config_value(*value, origin, special);
}

// The special tokens (bos_token, eos_token, ...) a template of this model
// or tokenizer is rendered with: a GGUF file's, or its folder's
// tokenizer_config.json's.
OrderedJson special_tokens_of(const std::string& path) {
  OrderedJson special = OrderedJson::object();
  if (is_gguf_path(path)) {
    const GgufTokenizerConfig& g = gguf_tokenizer_for(path);
    if (!g.bos_token.empty()) special["bos_token"] = g.bos_token;
    if (!g.eos_token.empty()) special["eos_token"] = g.eos_token;
    return special;
  }
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (fs::exists(dir / "tokenizer_config.json")) collect_special_tokens(read_json(dir / "tokenizer_config.json"), special);
  return special;
}

// A GGUF file carries its template (tokenizer.chat_template) and tokens.
std::optional<ChatTemplate> gguf_chat_template(const std::string& path) {
  const GgufTokenizerConfig& g = gguf_tokenizer_for(path);
  if (!g.chat_template) return std::nullopt;
  return ChatTemplate::from_source(*g.chat_template, path + " (tokenizer.chat_template)", special_tokens_of(path));
}

}  // namespace

struct ModelFolder::Lazy {
  std::once_flag tokenizer_once, template_once;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
};

ModelFolder ModelFolder::open(const std::string& model, ModelFolderOptions options) {
  ModelFolder f;
  f.argument_ = model;
  f.model_file_ = resolve_model_file(model);
  f.gguf_ = is_gguf_path(f.model_file_);
  f.dir_ = fs::path(f.model_file_).parent_path().string();
  f.genai_ = read_genai_config(f.dir_.empty() ? "." : f.dir_);
  if (!options.tokenizer.empty()) f.tokenizer_file_ = tokenizer_file_of(options.tokenizer);
  else if (f.gguf_) f.tokenizer_file_ = f.model_file_;
  else f.tokenizer_file_ = tokenizer_in(f.dir_.empty() ? fs::path(".") : fs::path(f.dir_));
  f.chat_template_file_ = options.chat_template;
  f.tool_parser_ = options.tool_parser;
  if (!f.tool_parser_.empty()) tool_call_family_named(f.tool_parser_);  // an unknown name fails at open, naming the known ones
  f.lazy_ = std::make_shared<Lazy>();
  return f;
}

std::string ModelFolder::name() const {
  std::string s = argument_;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  std::string stem = s.substr(s.find_last_of('/') + 1);
  return stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".onnx") == 0 ? stem.substr(0, stem.size() - 5) : stem;
}

std::shared_ptr<const Tokenizer> ModelFolder::tokenizer() const {
  std::call_once(lazy_->tokenizer_once, [&] {
    if (!tokenizer_file_.empty()) lazy_->tokenizer = load_tokenizer_file(tokenizer_file_);
  });
  SY_CHECK_KIND(lazy_->tokenizer, ErrorKind::NotFound,
                "no tokenizer (tokenizer.json, tokenizer.bin or one tok*.bin) beside " << argument_ << "; name one (--tokenizer, 'tokenizer:')");
  return lazy_->tokenizer;
}

const std::optional<ChatTemplate>& ModelFolder::chat_template() const {
  std::call_once(lazy_->template_once, [&] {
    if (!chat_template_file_.empty())
      lazy_->chat_template = chat_template_file(chat_template_file_, tokenizer_file_.empty() ? model_file_ : tokenizer_file_);
    // The tokenizer's first (a tokenizer named apart from the model brings
    // its template: its folder's, or a GGUF file's own), then the model's;
    // one folder is read once.
    const bool apart = !tokenizer_file_.empty() && tokenizer_file_ != model_file_ &&
                       (is_gguf_path(tokenizer_file_) || fs::path(tokenizer_file_).parent_path() != fs::path(model_file_).parent_path());
    if (!lazy_->chat_template && apart) lazy_->chat_template = chat_template_of(tokenizer_file_);
    if (!lazy_->chat_template) lazy_->chat_template = chat_template_of(model_file_);
  });
  return lazy_->chat_template;
}

const ToolCallFamily& ModelFolder::tool_call_family() const {
  if (!tool_parser_.empty()) return tool_call_family_named(tool_parser_);
  const auto& t = chat_template();
  return tool_call_family_for(t ? t->source() : std::string());
}

std::vector<int> ModelFolder::eos_ids() const {
  if (genai_ && !genai_->eos_ids.empty()) return genai_->eos_ids;
  if (gguf_) {
    // The file's end-of-generation tokens: eos, and end-of-turn/-message.
    const GgufTokenizerConfig& t = gguf_tokenizer_for(model_file_);
    std::vector<int> ids;
    for (const auto& id : {t.eos_id, t.eot_id, t.eom_id})
      if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
    if (!ids.empty()) return ids;
  }
  const fs::path dir(dir_);
  for (const char* name : {"generation_config.json", "config.json"}) {
    fs::path p = dir / name;
    if (!fs::exists(p)) continue;
    nlohmann::json j = read_config(p);
    if (j.contains("eos_token_id")) {
      auto ids = int_or_list(j["eos_token_id"]);
      if (!ids.empty()) return ids;
    }
  }
  if (auto id = tokenizer_config_eos_id(dir)) return {*id};
  return {2};
}

EmbeddingConvention ModelFolder::embedding_convention() const {
  EmbeddingConvention c;
  if (gguf_) {
    // llama.cpp's enum llama_pooling_type: 1 mean, 2 cls, 3 last (0 none and
    // 4 rank have no single vector and fall to the family's default).
    const gguf::File f = gguf::File::open(model_file_);
    const std::optional<std::string> arch = f.get_string("general.architecture");
    const std::string key = (arch ? *arch : std::string("llama")) + ".pooling_type";
    if (const std::optional<int64_t> t = f.get_int(key); t && *t >= 1 && *t <= 3) {
      c.pooling = *t == 1 ? Pooling::Mean : *t == 2 ? Pooling::Cls : Pooling::Last;
      c.source = model_file_ + " (" + key + ")";
      return c;
    }
    c.source = model_file_ + " (a generative model: mean of its tokens)";
    return c;
  }
  const fs::path dir(dir_);
  std::error_code ec;
  // sentence-transformers: modules.json lists the steps after the model,
  // the Pooling step's folder says how, a Normalize step normalises.
  if (fs::exists(dir / "modules.json", ec)) {
    const nlohmann::json modules = read_config(dir / "modules.json");
    SY_CHECK(modules.is_array(), (dir / "modules.json").string() << ": expected a list of modules");
    bool pooled = false;
    c.normalize = false;
    for (const auto& m : modules) {
      const std::string type = m.is_object() && m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "";
      if (type.find("Normalize") != std::string::npos) c.normalize = true;
      if (type.find("Pooling") == std::string::npos) continue;
      const fs::path cfg = dir / (m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "") / "config.json";
      const nlohmann::json p = read_config(cfg);
      auto on = [&](const char* k) { return p.contains(k) && p[k].is_boolean() && p[k].get<bool>(); };
      if (on("pooling_mode_lasttoken")) c.pooling = Pooling::Last;
      else if (on("pooling_mode_cls_token")) c.pooling = Pooling::Cls;
      else if (on("pooling_mode_mean_tokens")) c.pooling = Pooling::Mean;
      else
        SY_THROW(cfg.string() << ": the pooling it asks for is not supported (pooling_mode_lasttoken, pooling_mode_cls_token and "
                                 "pooling_mode_mean_tokens are)");
      c.source = cfg.string();
      pooled = true;
    }
    if (pooled) return c;
    c.normalize = true;
  }
  // A decoder exported for embeddings names a bare *Model architecture
  // (Qwen3Model, MistralModel); a generative one *ForCausalLM or *LMHeadModel.
  if (fs::exists(dir / "config.json", ec)) {
    const nlohmann::json j = read_config(dir / "config.json");
    if (j.is_object() && j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
        j["architectures"][0].is_string()) {
      const std::string arch = j["architectures"][0].get<std::string>();
      const bool bare = arch.size() > 5 && arch.compare(arch.size() - 5, 5, "Model") == 0 && arch.find("For") == std::string::npos &&
                        arch.find("LMHead") == std::string::npos;  // GPT2LMHeadModel generates
      if (bare) {
        c.pooling = Pooling::Last;
        c.source = (dir / "config.json").string() + " (" + arch + ": a decoder embedding model pools its last token)";
        return c;
      }
    }
  }
  c.source = "the default for a generative model (mean of its tokens)";
  return c;
}

SamplingDefaults ModelFolder::sampling_defaults() const {
  SamplingDefaults d;
  if (gguf_) return d;  // GGUF carries no sampling defaults
  const fs::path dir(dir_);
  for (const char* name : {"generation_config.json", "genai_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::exists(p)) continue;
    nlohmann::json j = read_config(p);
    if (std::string(name) == "genai_config.json") j = j.contains("search") ? j["search"] : nlohmann::json::object();
    if (!j.is_object()) continue;
    auto number = [&](const char* key) -> std::optional<float> {
      if (!j.contains(key) || j[key].is_null()) return std::nullopt;
      SY_CHECK(j[key].is_number(), p.string() << ": '" << key << "' must be a number");
      return j[key].get<float>();
    };
    const bool sampling = !j.contains("do_sample") || !j["do_sample"].is_boolean() || j["do_sample"].get<bool>();
    d.repetition_penalty = number("repetition_penalty");
    if (sampling) {
      d.temperature = number("temperature");
      d.top_p = number("top_p");
      d.min_p = number("min_p");
      if (auto k = number("top_k")) d.top_k = static_cast<int>(*k);
    }
    if (d.repetition_penalty && *d.repetition_penalty == 1.f) d.repetition_penalty.reset();
    if (!d.empty()) {
      d.source = p.string();
      return d;
    }
  }
  return d;
}

int64_t ModelFolder::config_context_length() const {
  const fs::path cfg = fs::path(dir_) / "config.json";
  std::error_code ec;
  if (gguf_ || !fs::exists(cfg, ec)) return 0;
  const OrderedJson j = read_json(cfg);
  for (const char* key : {"max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"})
    if (j.is_object() && j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  return 0;
}

std::string ModelFolder::find_tokenizer_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return fs::exists(path, ec) ? path : std::string();
  std::string found = tokenizer_in(path);
  if (found.empty()) {
    // A folder holding one GGUF file and no ONNX model: the GGUF's.
    std::vector<fs::path> gguf;
    bool onnx = false;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.path().extension() == ".gguf") gguf.push_back(e.path());
      onnx = onnx || e.path().extension() == ".onnx";
    }
    if (!onnx && gguf.size() == 1 && is_gguf_path(gguf[0].string())) found = gguf[0].string();
  }
  return found;
}

std::string ModelFolder::tokenizer_file_of(const std::string& path) {
  std::error_code ec;
  SY_CHECK_KIND(fs::exists(path, ec), ErrorKind::NotFound, path << ": no such tokenizer file or folder");
  const std::string found = find_tokenizer_file(path);
  SY_CHECK_KIND(!found.empty(), ErrorKind::NotFound, path << ": no tokenizer in this folder (tokenizer.json, tokenizer.bin or one tok*.bin)");
  return found;
}

std::unique_ptr<Tokenizer> ModelFolder::load_tokenizer_file(const std::string& file) {
  const fs::path config_path = fs::path(file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::path(file).extension() != ".json" || !fs::exists(config_path, ec)) return load_tokenizer(file);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_text(config_path));
  } catch (const nlohmann::json::exception& e) {
    SY_THROW(config_path.string() << ": not valid JSON: " << e.what());
  }
  return load_tokenizer(file, &config, config_path.string());
}

ChatTemplate ModelFolder::chat_template_file(const std::string& path, const std::string& model) {
  const fs::path p(path);
  // A template file brings its tokens when a tokenizer_config.json lies
  // beside it; otherwise it is rendered with the model's (what
  // transformers does with a template passed to apply_chat_template).
  OrderedJson special = OrderedJson::object();
  if (fs::exists(p.parent_path() / "tokenizer_config.json")) collect_special_tokens(read_json(p.parent_path() / "tokenizer_config.json"), special);
  else if (!model.empty()) special = special_tokens_of(model);
  if (p.extension() == ".json") {
    const OrderedJson j = read_json(p);
    SY_CHECK(j.is_object() && j.contains("chat_template"), path << ": no 'chat_template' field");
    return ChatTemplate::from_config_value(j["chat_template"], path, special);
  }
  return ChatTemplate::from_source(read_text(p), path, special);
}

std::optional<ChatTemplate> ModelFolder::chat_template_of(const std::string& path) {
  if (is_gguf_path(path)) return gguf_chat_template(path);
  std::error_code ec;
  return folder_chat_template(fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path());
}

}  // namespace sy
