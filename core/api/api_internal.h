// What the C API's source files share: status codes from exceptions (none
// crosses into C), versioned struct copies, and the handles behind the
// opaque types of switchyard.h.
#pragma once
#include "switchyard/switchyard.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "facade/engine.h"

namespace sy::api {

// Sets sy_last_error on this thread and returns code.
sy_api_status fail(sy_api_status code, const std::string& message);
sy_api_status status_for(sy::ErrorKind kind);
const char* last_error();

// Runs f, turning every exception into a status and sy_last_error.
template <typename F>
sy_api_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const sy::Error& e) {
    return fail(status_for(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(SY_API_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(SY_API_ERROR, e.what());
  } catch (...) {
    return fail(SY_API_ERROR, "unknown error");
  }
}

// Every struct crossing this API starts with struct_size and only grows at
// the end; these two are the only places one is copied.
// The caller's input may be older (shorter) than ours: take the fields it
// has and leave the newer ones zero ("off"). Shorter than the 1.0 struct
// (min_size) is a caller error.
template <typename T>
T read_struct(const T* in, size_t min_size, const char* what) {
  if (!in || in->struct_size < min_size)
    throw sy::Error(std::string(what) + ": required, with struct_size set to its sizeof (at least " + std::to_string(min_size) +
                    ")");
  T out{};
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}
// The caller's output may be older: fill only what its struct_size covers,
// and leave its struct_size as it was.
template <typename T>
void write_struct(T* out, const T& value, size_t min_size, const char* what) {
  if (!out || out->struct_size < min_size)
    throw sy::Error(std::string(what) + ": required, with struct_size set to its sizeof (at least " + std::to_string(min_size) +
                    ")");
  const uint32_t size = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(size, sizeof(T)));
  out->struct_size = size;
}
#define SY_SIZE_THROUGH(T, field) (offsetof(T, field) + sizeof(((T*)nullptr)->field))

// sy_engine_tokenizer_info's JSON for an engine just opened (api/tokens.cpp).
std::string describe_tokenizer(const sy::Engine& engine, const sy::Tokenizer& tokenizer, const sy::ChatTemplate* chat_template);

}  // namespace sy::api

// A tokenizer with its chat template: an engine's, or one opened on its own
// (sy_tokenizer_open) by a router or an ingress that runs no model.
struct sy_tokenizer {
  std::shared_ptr<const sy::Tokenizer> tokenizer;  // null: the engine has none
  std::optional<sy::ChatTemplate> chat_template;
  std::string path;  // the tokenizer file ("" if none)
  std::string where; // what error messages name when there is no template
};

struct sy_engine {
  std::unique_ptr<sy::Engine> engine;
  sy_tokenizer tok;
  std::string model_name;
  std::string sampling_defaults = "{}";  // JSON
  std::string tokenizer_info = "{}";     // JSON (sy_engine_tokenizer_info)
  const sy::ToolCallFamily* tool_parser = nullptr;  // sy_engine_tool_parser
  std::vector<std::string> special_texts;           // special tokens' strings, longest first (sy_parse_output)
  std::vector<int> end_ids;                         // end-of-generation ids, left out of parsed output
  // sy_kv_events_poll's last batch, which the returned pointers point into.
  std::vector<sy::KvEvent> polled_events;
  std::vector<sy_kv_event> polled_structs;
  std::vector<const sy_kv_event*> polled_pointers;
};


namespace sy::api {
// Chooses the engine's tool-call family and lists its special tokens
// (api/chat_output.cpp).
void set_up_output_parsing(sy_engine& engine);
}  // namespace sy::api
