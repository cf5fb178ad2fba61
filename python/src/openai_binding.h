// switchyard._core.OpenAIProtocol: `switchyard serve`'s OpenAI protocol
// (tools/server/openai_protocol.h) over an engine of this module, so the
// Ray deployment answers every request exactly as serve does.
#pragma once
#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include <switchyard/switchyard.h>

#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "openai_protocol.h"

namespace sy::python {

namespace detail {
inline void check_open(const std::shared_ptr<bool>& open) {
  if (!*open) throw server::ApiError{503, "the engine is closed", "server_error", "", "service_unavailable"};
}

inline std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
inline server::Endpoint endpoint_of(const std::string& name) {
  if (name == "completions") return server::Endpoint::completions;
  if (name == "chat") return server::Endpoint::chat;
  if (name == "responses") return server::Endpoint::responses;
  throw server::ApiError{404, "no such endpoint: " + name, "invalid_request_error", "", "not_found"};
}
}  // namespace detail
using detail::check_open;
using detail::endpoint_of;
using detail::dump;
namespace nb = nanobind;

// One request's answer. Waiting releases the GIL, so a Ray replica waits
// in a worker thread while its event loop serves others.
class OpenAICallHandle {
 public:
  OpenAICallHandle(std::shared_ptr<server::Call> c, std::shared_ptr<bool> open) : call_(std::move(c)), open_(std::move(open)) {}
  ~OpenAICallHandle() {
    // Its engine requests die with the engine: releasing them after it
    // closed would touch freed memory, so a call that outlived its engine
    // is left as it is.
    if (!*open_) new std::shared_ptr<server::Call>(std::move(call_));
  }
  bool streaming() const { return call_->streaming(); }
  std::string whole() {
    check_open(open_);
    nb::gil_scoped_release release;
    return dump(call_->whole());
  }
  // (server-sent events text, finished)
  std::tuple<std::string, bool> next_events(int wait_ms) {
    check_open(open_);
    std::string out;
    bool done;
    {
      nb::gil_scoped_release release;
      done = call_->next_events(out, wait_ms);
    }
    return {std::move(out), done};
  }

 private:
  std::shared_ptr<server::Call> call_;
  std::shared_ptr<bool> open_;
};

class OpenAIProtocolHandle {
 public:
  OpenAIProtocolHandle(sy_engine* e, std::shared_ptr<bool> open, server::ProtocolOptions o)
      : open_(std::move(open)), p_(e, std::move(o)) {}
  // endpoint: "completions", "chat" or "responses".
  OpenAICallHandle* start(const std::string& body, const std::string& endpoint) {
    check_open(open_);
    const server::Endpoint e = endpoint_of(endpoint);
    std::shared_ptr<server::Call> call;
    {
      nb::gil_scoped_release release;  // tokenizing and rendering a long chat take a while
      call = p_.start(body, e);
    }
    return new OpenAICallHandle(std::move(call), open_);
  }
  std::vector<std::vector<int32_t>> prompts(const std::string& body, const std::string& endpoint) {
    check_open(open_);
    const server::Endpoint e = endpoint_of(endpoint);
    nb::gil_scoped_release release;
    return p_.prompts(body, e);
  }
  std::string models() const { return dump(p_.models()); }
  std::string model(const std::string& id) const { return dump(p_.model(id)); }
  std::string tokenize(const std::string& body) {
    check_open(open_);
    return dump(p_.tokenize(body));
  }
  std::string detokenize(const std::string& body) const {
    check_open(open_);
    return dump(p_.detokenize(body));
  }
  // Runs the model: the GIL is released while it does.
  std::string embeddings(const std::string& body) {
    check_open(open_);
    nb::gil_scoped_release release;
    return dump(p_.embeddings(body));
  }
  std::string tokenizer_info() const { return dump(p_.tokenizer_info()); }
  std::string metrics() const {
    check_open(open_);
    return p_.metrics();
  }
  const std::string& model_name() const { return p_.model_name(); }
  int in_flight() const { return p_.in_flight(); }

 private:
  std::shared_ptr<bool> open_;
  server::OpenAIProtocol p_;
};

// Registers OpenAIProtocol, OpenAICall and ProtocolError in the module.
void bind_openai(nanobind::module_& m);

// The protocol over engine; engine_open turns false when the engine closes.
OpenAIProtocolHandle* make_openai_protocol(sy_engine* engine, std::shared_ptr<bool> engine_open, const std::string& model_name,
                                           int max_tokens_limit, int max_n);

}  // namespace sy::python
