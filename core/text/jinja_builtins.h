// What jinja_filters.cpp, jinja_tests.cpp and jinja_builtins.cpp share:
// argument access by position or keyword, and Python's string and
// sequence operations. Not part of the public API.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/jinja_internal.h"

namespace sy::jinja::detail {

// Argument `index` (positional) or `name` (keyword); null when absent.
const Value* arg(Args& a, size_t index, const char* name);
std::string arg_str(Ctx& c, Args& a, size_t index, const char* name, const std::string& fallback);
int64_t arg_int(Ctx& c, Args& a, size_t index, const char* name, int64_t fallback);
bool arg_bool(Args& a, size_t index, const char* name, bool fallback);

bool fits_int64(double d);
// str.strip/lstrip/rstrip (Python's whitespace, or `chars`).
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<char32_t> cps(const std::string& s);  // code points
std::string utf8(const std::vector<char32_t>& v);
std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string jinja_title(const std::string& s);
std::string capitalize(const std::string& s);
bool is_word_char(char32_t cp);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);
std::string html_escape(const std::string& s);
int64_t py_len(Ctx& c, const Value& v);
// "a.b.0": attributes and indices in turn, as Jinja's attribute= arguments.
Value attribute_path(Ctx& c, const Value& v, const std::string& path);
// obj.key as a bound method of str, list or dict.
Value method(Ctx& c, const Value& obj, const std::string& key);
Value sort_values(Ctx& c, List items, bool reverse, bool case_sensitive, const std::string& attribute);
// select/reject: whether v passes the test named by a's arguments from `from` on.
bool passes(Ctx& c, const Value& v, Args& a, size_t from);

}  // namespace sy::jinja::detail
