#include "plugin_host/options.h"

#include <charconv>
#include <sstream>

#include "base/error.h"

namespace sy {

const char* option_type_name(int32_t type) {
  switch (type) {
    case SY_OPTION_BOOL: return "bool";
    case SY_OPTION_INT: return "int";
    case SY_OPTION_FLOAT: return "float";
    case SY_OPTION_STRING: return "string";
    default: return "unknown";
  }
}

std::vector<OptionSchema> read_option_schema(const sy_option_desc* const* opts, int32_t count, const std::string& owner) {
  std::vector<OptionSchema> out;
  SY_CHECK(count >= 0 && (count == 0 || opts), owner << ": option list is missing or has a negative count");
  for (int32_t i = 0; i < count; ++i) {
    const sy_option_desc* d = opts[i];
    SY_CHECK(d && SY_HAS_FIELD(d, sy_option_desc, help), owner << ": option " << i << " has a malformed descriptor");
    SY_CHECK(d->name && *d->name, owner << ": option " << i << " has no name");
    SY_CHECK(d->type >= SY_OPTION_BOOL && d->type <= SY_OPTION_STRING,
             owner << ": option '" << d->name << "' has unknown type " << d->type);
    OptionSchema s;
    s.name = d->name;
    s.type = d->type;
    if (d->default_value) s.default_value = d->default_value;
    s.help = d->help ? d->help : "";
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

OptionValue parse(const OptionSchema& s, const std::string& text, const std::string& where) {
  auto fail = [&] { SY_THROW(where << ": expected " << option_type_name(s.type) << ", got '" << text << "'"); };
  switch (s.type) {
    case SY_OPTION_BOOL:
      if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
      if (text == "false" || text == "0" || text == "no" || text == "off") return false;
      fail();
      break;
    case SY_OPTION_INT: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || text.empty()) fail();
      return v;
    }
    case SY_OPTION_FLOAT: {
      try {
        size_t used = 0;
        double v = std::stod(text, &used);
        if (used != text.size()) fail();
        return v;
      } catch (const std::logic_error&) {
        fail();
      }
      break;
    }
    default: return text;
  }
  return text;
}

}  // namespace

OptionValues OptionValues::validate(const std::vector<OptionSchema>& schema, const std::map<std::string, RawOption>& raw,
                                    const std::string& component) {
  OptionValues out;
  for (const auto& [name, value] : raw) {
    bool known = false;
    for (const auto& s : schema) known = known || s.name == name;
    if (!known) {
      std::ostringstream os;
      os << value.where << ": unknown option '" << name << "' for " << component << "; its options are:";
      if (schema.empty()) os << " (none)";
      for (const auto& s : schema) os << " " << s.name << " (" << option_type_name(s.type) << ")";
      throw Error(os.str());
    }
  }
  for (const auto& s : schema) {
    auto it = raw.find(s.name);
    if (it != raw.end()) {
      out.values_[s.name] = parse(s, it->second.text, it->second.where);
    } else {
      SY_CHECK(s.default_value, component << ": required option '" << s.name << "' (" << option_type_name(s.type)
                                          << ") is not set");
      out.values_[s.name] = parse(s, *s.default_value, component + ": default of option '" + s.name + "'");
    }
  }
  return out;
}

const OptionValue* OptionValues::find(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

std::string OptionValues::str() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [k, v] : values_) {
    os << (first ? "" : ", ") << k << "=";
    std::visit([&](const auto& x) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, bool>) os << (x ? "true" : "false");
      else os << x;
    }, v);
    first = false;
  }
  return os.str();
}

}  // namespace sy
