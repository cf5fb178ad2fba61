// Typed component options: the schema a component declares (from its C
// sy_option_desc list, or built-in), and values from a manifest validated
// against it with errors that point at the manifest line.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "switchyard/plugin.h"

namespace sy {

struct OptionSchema {
  std::string name;
  int32_t type = SY_OPTION_STRING;  // SY_OPTION_*
  std::optional<std::string> default_value;
  std::string help;
};

// Copies a plugin's option descriptors (reading only fields its struct_size has).
std::vector<OptionSchema> read_option_schema(const sy_option_desc* const* opts, int32_t count, const std::string& owner);

// A value as written in the manifest, with where it was written.
struct RawOption {
  std::string text;
  std::string where;  // "manifest.yaml:12: passes[0].options.min_count"
};

using OptionValue = std::variant<bool, int64_t, double, std::string>;

// Validated, typed options for one component instance.
class OptionValues {
 public:
  // Throws naming `where` (or the component) for unknown names, wrong types
  // and missing required options; defaults fill the rest.
  static OptionValues validate(const std::vector<OptionSchema>& schema, const std::map<std::string, RawOption>& raw,
                               const std::string& component);
  const OptionValue* find(const std::string& name) const;
  const std::map<std::string, OptionValue>& all() const { return values_; }
  std::string str() const;  // "a=1, b=true"

 private:
  std::map<std::string, OptionValue> values_;
};

const char* option_type_name(int32_t type);

}  // namespace sy
