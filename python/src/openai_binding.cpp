#include "openai_binding.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include "openai_protocol.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace sy::python {
namespace {

PyObject* g_protocol_error = nullptr;

// A protocol error as the HTTP answer a door sends: its status and body.
std::string error_body(const server::ApiError& e) {
  using json = nlohmann::json;
  const json err = {{"error", {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                               {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return err.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

OpenAIProtocolHandle* make_openai_protocol(sy_engine* engine, std::shared_ptr<bool> engine_open, const std::string& model_name,
                                           int max_tokens_limit, int max_n) {
  server::ProtocolOptions o;
  o.model_name = model_name;
  o.max_tokens_limit = max_tokens_limit;
  o.max_n = max_n;
  return new OpenAIProtocolHandle(engine, std::move(engine_open), std::move(o));
}

void bind_openai(nb::module_& m) {
  // ProtocolError(message): .status (the HTTP status) and .body (OpenAI's
  // error JSON) are what a door answers with.
  g_protocol_error = PyErr_NewException("switchyard._core.ProtocolError", PyExc_RuntimeError, nullptr);
  m.attr("ProtocolError") = nb::handle(g_protocol_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const server::ApiError& e) {
      nb::object err = nb::steal(PyObject_CallFunction(g_protocol_error, "s", e.message.c_str()));
      if (err.is_valid()) {
        nb::setattr(err, "status", nb::int_(e.status));
        nb::setattr(err, "body", nb::str(error_body(e).c_str()));
        PyErr_SetObject(g_protocol_error, err.ptr());
      }
    }
  });

  nb::class_<OpenAICallHandle>(m, "OpenAICall")
      .def_prop_ro("streaming", &OpenAICallHandle::streaming)
      .def("whole", &OpenAICallHandle::whole)
      .def("next_events", &OpenAICallHandle::next_events, "wait_ms"_a = 100);

  nb::class_<OpenAIProtocolHandle>(m, "OpenAIProtocol")
      .def("start", &OpenAIProtocolHandle::start, "body"_a, "endpoint"_a, nb::rv_policy::take_ownership)
      .def("prompts", &OpenAIProtocolHandle::prompts, "body"_a, "endpoint"_a)
      .def("models", &OpenAIProtocolHandle::models)
      .def("model", &OpenAIProtocolHandle::model, "id"_a)
      .def("tokenize", &OpenAIProtocolHandle::tokenize, "body"_a)
      .def("detokenize", &OpenAIProtocolHandle::detokenize, "body"_a)
      .def("embeddings", &OpenAIProtocolHandle::embeddings, "body"_a)
      .def("tokenizer_info", &OpenAIProtocolHandle::tokenizer_info)
      .def("metrics", &OpenAIProtocolHandle::metrics)
      .def_prop_ro("model_name", &OpenAIProtocolHandle::model_name)
      .def_prop_ro("in_flight", &OpenAIProtocolHandle::in_flight);
}

}  // namespace sy::python
