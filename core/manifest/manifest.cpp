#include "device/device_registry.h"
#include "manifest/manifest.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace sy {
namespace fs = std::filesystem;

struct Manifest::Impl {
  YAML::Node root;
  std::string path;
  fs::path dir;
};

namespace {

const std::set<std::string> kSectionKeys = {"model", "tokenizer", "chat_template", "tool_parser", "plugins", "passes", "kernels", "scheduler",
                                            "cache", "drafter", "logits_processor", "threads", "max_context", "simplify",
                                            "max_batch_tokens", "max_seqs", "limits", "device", "gguf_dequantize"};

struct Ctx {
  const std::string& file;
  const fs::path& dir;
  std::string at(const YAML::Node& n, const std::string& key) const {
    std::ostringstream os;
    os << file;
    if (n.Mark().line >= 0) os << ":" << n.Mark().line + 1;
    os << ": " << key;
    return os.str();
  }
};

// ${VAR} / ${VAR:-default} from the environment.
std::string expand(const std::string& s, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      size_t end = s.find('}', i);
      SY_CHECK(end != std::string::npos, where << ": unterminated ${ in '" << s << "'");
      std::string body = s.substr(i + 2, end - i - 2);
      std::optional<std::string> fallback;
      if (size_t d = body.find(":-"); d != std::string::npos) {
        fallback = body.substr(d + 2);
        body = body.substr(0, d);
      }
      const char* v = std::getenv(body.c_str());
      SY_CHECK(v || fallback, where << ": environment variable '" << body << "' is not set");
      out += v ? v : *fallback;
      i = end + 1;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string scalar(const Ctx& c, const YAML::Node& n, const std::string& key) {
  SY_CHECK(n.IsScalar(), c.at(n, key) << ": expected a value, got a " << (n.IsMap() ? "map" : n.IsSequence() ? "list" : "null"));
  return expand(n.Scalar(), c.at(n, key));
}

template <typename T>
T number(const Ctx& c, const YAML::Node& n, const std::string& key) {
  std::string s = scalar(c, n, key);
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size()) return static_cast<T>(v);
  } catch (const std::exception&) {
  }
  SY_THROW(c.at(n, key) << ": expected an integer, got '" << s << "'");
}

bool boolean(const Ctx& c, const YAML::Node& n, const std::string& key) {
  std::string s = scalar(c, n, key);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  SY_THROW(c.at(n, key) << ": expected true or false, got '" << s << "'");
}

std::string path_value(const Ctx& c, const YAML::Node& n, const std::string& key) {
  fs::path p(scalar(c, n, key));
  return (p.is_absolute() ? p : c.dir / p).lexically_normal().string();
}

void check_keys(const Ctx& c, const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    std::string k = kv.first.Scalar();
    // yaml-cpp keeps one of two equal keys silently; a config where a later
    // line is ignored is a trap, so it is an error here.
    SY_CHECK(seen.insert(k).second, c.at(kv.first, what.empty() ? k : what + "." + k) << ": duplicate key");
    if (allowed.count(k)) continue;
    std::ostringstream os;
    os << c.at(kv.first, what.empty() ? k : what + "." + k) << ": unknown key; allowed keys:";
    for (const auto& a : allowed) os << " " << a;
    throw Error(os.str());
  }
}

// "name" or {name: x, options: {...}} (a scheduler also on_failure:
// fail|builtin, a drafter draft_length: adaptive|fixed)
ComponentSelection component(const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& kind = "") {
  const bool scheduler = kind == "scheduler", drafter = kind == "drafter";
  ComponentSelection sel;
  sel.where = c.at(n, key);
  if (n.IsScalar()) {
    sel.name = scalar(c, n, key);
    return sel;
  }
  SY_CHECK(n.IsMap(), c.at(n, key) << ": expected a name or a map with 'name' and 'options'");
  if (scheduler) check_keys(c, n, {"name", "options", "on_failure"}, key);
  else if (drafter) check_keys(c, n, {"name", "options", "draft_length"}, key);
  else check_keys(c, n, {"name", "options"}, key);
  SY_CHECK(n["name"], c.at(n, key) << ": missing 'name'");
  if (const YAML::Node& f = n["on_failure"]) {
    sel.on_failure = scalar(c, f, key + ".on_failure");
    SY_CHECK(sel.on_failure == "fail" || sel.on_failure == "builtin",
             c.at(f, key + ".on_failure") << ": expected 'fail' or 'builtin', got '" << sel.on_failure << "'");
  }
  if (const YAML::Node& f = n["draft_length"]) {
    sel.draft_length = scalar(c, f, key + ".draft_length");
    SY_CHECK(sel.draft_length == "adaptive" || sel.draft_length == "fixed",
             c.at(f, key + ".draft_length") << ": expected 'adaptive' or 'fixed', got '" << sel.draft_length << "'");
  }
  sel.name = scalar(c, n["name"], key + ".name");
  if (const YAML::Node& o = n["options"]) {
    SY_CHECK(o.IsMap(), c.at(o, key + ".options") << ": expected a map of option: value");
    for (const auto& kv : o) {
      std::string k = kv.first.Scalar();
      std::string okey = key + ".options." + k;
      sel.options[k] = RawOption{scalar(c, kv.second, okey), c.at(kv.second, okey)};
    }
  }
  return sel;
}

void apply(const Ctx& c, const YAML::Node& sec, EngineConfig& cfg, const std::string& prefix) {
  SY_CHECK(sec.IsMap(), c.at(sec, prefix.empty() ? "(top level)" : prefix) << ": expected a map");
  auto key = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  if (const auto& n = sec["model"]) cfg.model = path_value(c, n, key("model"));
  if (const auto& n = sec["tokenizer"]) cfg.tokenizer = path_value(c, n, key("tokenizer"));
  if (const auto& n = sec["chat_template"]) cfg.chat_template = path_value(c, n, key("chat_template"));
  if (const auto& n = sec["tool_parser"]) cfg.tool_parser = scalar(c, n, key("tool_parser"));
  if (const auto& n = sec["threads"]) cfg.threads = number<int>(c, n, key("threads"));
  if (const auto& n = sec["device"]) {
    cfg.device = scalar(c, n, key("device"));
    try {
      parse_device_spec(cfg.device);
    } catch (const Error& e) {
      SY_THROW(c.at(n, key("device")) << ": " << e.what());
    }
  }
  if (const auto& n = sec["max_context"]) cfg.max_context = number<int64_t>(c, n, key("max_context"));
  if (const auto& n = sec["simplify"]) cfg.simplify = boolean(c, n, key("simplify"));
  if (const auto& n = sec["gguf_dequantize"]) cfg.gguf_dequantize = boolean(c, n, key("gguf_dequantize"));
  if (const auto& n = sec["max_batch_tokens"]) cfg.max_batch_tokens = number<int>(c, n, key("max_batch_tokens"));
  if (const auto& n = sec["max_seqs"]) cfg.max_seqs = number<int>(c, n, key("max_seqs"));
  if (const auto& n = sec["limits"]) {
    SY_CHECK(n.IsMap(), c.at(n, key("limits")) << ": expected a map of limit: number");
    check_keys(c, n, {"max_model_bytes", "max_tensors", "max_graph_depth", "max_prompt_tokens", "max_kv_mb", "max_queue", "max_plugin_failures"}, key("limits"));
    auto limit = [&](const char* name, auto& field) {
      if (const auto& v = n[name]) {
        int64_t x = number<int64_t>(c, v, key("limits") + "." + name);
        SY_CHECK(x >= 0, c.at(v, key("limits") + "." + name) << ": must be >= 0, got " << x);
        field = static_cast<std::decay_t<decltype(field)>>(x);
      }
    };
    limit("max_model_bytes", cfg.limits.max_model_bytes);
    limit("max_tensors", cfg.limits.max_tensors);
    limit("max_graph_depth", cfg.limits.max_graph_depth);
    limit("max_prompt_tokens", cfg.limits.max_prompt_tokens);
    limit("max_kv_mb", cfg.limits.max_kv_mb);
    limit("max_queue", cfg.limits.max_queue);
    limit("max_plugin_failures", cfg.limits.max_plugin_failures);
  }
  if (const auto& n = sec["plugins"]) {
    SY_CHECK(n.IsSequence(), c.at(n, key("plugins")) << ": expected a list");
    cfg.plugins.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      std::string k = key("plugins") + "[" + std::to_string(i) + "]";
      const YAML::Node& p = n[i];
      PluginSpec spec;
      spec.where = c.at(p, k);
      if (p.IsScalar()) {
        spec.path = path_value(c, p, k);
      } else {
        SY_CHECK(p.IsMap(), spec.where << ": expected a path or a map with 'path' and 'sha256'");
        check_keys(c, p, {"path", "sha256"}, k);
        SY_CHECK(p["path"], spec.where << ": missing 'path'");
        spec.path = path_value(c, p["path"], k + ".path");
        if (p["sha256"]) {
          spec.sha256 = scalar(c, p["sha256"], k + ".sha256");
          SY_CHECK(spec.sha256->size() == 64 && spec.sha256->find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
                   c.at(p["sha256"], k + ".sha256") << ": expected 64 hex digits");
        }
      }
      cfg.plugins.push_back(spec);
    }
  }
  if (const auto& n = sec["passes"]) {
    SY_CHECK(n.IsSequence() || n.IsNull(), c.at(n, key("passes")) << ": expected a list");
    cfg.passes.clear();
    for (size_t i = 0; i < n.size(); ++i) cfg.passes.push_back(component(c, n[i], key("passes") + "[" + std::to_string(i) + "]"));
  }
  if (const auto& n = sec["kernels"]) {
    SY_CHECK(n.IsMap(), c.at(n, key("kernels")) << ": expected a map with 'forbid' and/or 'pin'");
    check_keys(c, n, {"forbid", "pin"}, key("kernels"));
    cfg.kernels = KernelPolicy{};
    if (const auto& f = n["forbid"]) {
      SY_CHECK(f.IsSequence(), c.at(f, key("kernels.forbid")) << ": expected a list of providers");
      for (size_t i = 0; i < f.size(); ++i) cfg.kernels.forbid.insert(scalar(c, f[i], key("kernels.forbid")));
    }
    if (const auto& p = n["pin"]) {
      SY_CHECK(p.IsMap(), c.at(p, key("kernels.pin")) << ": expected a map of op type: provider");
      for (const auto& kv : p) cfg.kernels.pin[kv.first.Scalar()] = scalar(c, kv.second, key("kernels.pin." + kv.first.Scalar()));
    }
  }
  auto optional_component = [&](const char* k, std::optional<ComponentSelection>& out) {
    if (const auto& n = sec[k]) {
      if (n.IsNull() || (n.IsScalar() && n.Scalar() == "none")) out.reset();
      else out = component(c, n, key(k), k);
    }
  };
  optional_component("scheduler", cfg.scheduler);
  optional_component("cache", cfg.cache);
  optional_component("drafter", cfg.drafter);
  optional_component("logits_processor", cfg.logits_processor);
}

}  // namespace

Manifest Manifest::parse(const std::string& text, const std::string& path) {
  // yaml-cpp reports problems (bad conversions, invalid nodes) as its own
  // exceptions; they become errors that name the file and line.
  try {
    return parse_unchecked(text, path);
  } catch (const YAML::Exception& e) {
    SY_THROW(path << ":" << e.mark.line + 1 << ": " << e.msg);
  }
}

Manifest Manifest::parse_unchecked(const std::string& text, const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  try {
    impl->root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    SY_THROW(path << ":" << e.mark.line + 1 << ":" << e.mark.column + 1 << ": YAML syntax error: " << e.msg);
  }
  SY_CHECK(impl->root.IsMap(), path << ": the manifest must be a YAML map (model:, plugins:, passes:, profiles: ...)");
  Ctx c{impl->path, impl->dir};
  std::set<std::string> top = kSectionKeys;
  top.insert("profiles");
  top.insert("unfused_fallback");  // the top level's own: not a profile setting
  check_keys(c, impl->root, top, "");
  if (const auto& p = impl->root["profiles"]) {
    SY_CHECK(p.IsMap(), c.at(p, "profiles") << ": expected a map of profile name: settings");
    for (const auto& kv : p) {
      SY_CHECK(kv.second.IsMap() || kv.second.IsNull(), c.at(kv.second, "profiles." + kv.first.Scalar()) << ": expected a map");
      if (kv.second.IsMap()) check_keys(c, kv.second, kSectionKeys, "profiles." + kv.first.Scalar());
    }
  }
  Manifest m;
  m.impl_ = impl;
  m.path_ = path;
  // Resolve every profile once now so errors surface at load, not at use.
  m.resolve("");
  for (const auto& name : m.profile_names()) m.resolve(name);
  return m;
}

Manifest Manifest::load(const std::string& path) {
  // Manifests are small; refuse devices, directories and huge files before reading.
  std::error_code ec;
  SY_CHECK_KIND(fs::is_regular_file(path, ec), ErrorKind::NotFound, path << ": cannot open the manifest (not a regular file)");
  SY_CHECK(fs::file_size(path, ec) <= (1u << 20), path << ": the manifest is larger than 1 MiB");
  std::ifstream in(path);
  SY_CHECK(in, path << ": cannot open the manifest");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

std::vector<std::string> Manifest::profile_names() const {
  std::vector<std::string> names;
  if (const auto& p = impl_->root["profiles"])
    for (const auto& kv : p) names.push_back(kv.first.Scalar());
  return names;
}

EngineConfig Manifest::resolve(const std::string& profile) const {
  Ctx c{impl_->path, impl_->dir};
  EngineConfig cfg;
  cfg.manifest_path = impl_->path;
  cfg.profile = profile;
  apply(c, impl_->root, cfg, "");
  if (profile.empty())
    if (const auto& n = impl_->root["unfused_fallback"]) cfg.unfused_fallback = boolean(c, n, "unfused_fallback");
  if (!profile.empty()) {
    const YAML::Node p = impl_->root["profiles"] ? impl_->root["profiles"][profile] : YAML::Node();
    if (!p) {
      std::ostringstream os;
      os << impl_->path << ": no profile '" << profile << "'; profiles:";
      auto names = profile_names();
      if (names.empty()) os << " (none)";
      for (const auto& n : names) os << " " << n;
      throw Error(os.str());
    }
    if (p.IsMap()) apply(c, p, cfg, "profiles." + profile);
  }
  return cfg;
}

}  // namespace sy
