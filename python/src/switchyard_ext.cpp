// switchyard._core: the Python binding of the C embedding API (switchyard.h).
//
// Only the C API is used, so the package builds against an installed
// libswitchyard like any other embedder. No Python code ever runs on an
// engine thread: the engine's callbacks append to a per-request buffer under
// a mutex and wake whoever waits (a condition variable for threads that
// block with the GIL released, an eventfd for asyncio loops).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <switchyard/switchyard.h>

#include "openai_binding.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/eventfd.h>
#include <unistd.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// A failed C API call: its status code and sy_last_error(), raised in
// Python as the exception class registered for the code.
struct ApiError : std::runtime_error {
  sy_api_status code;
  ApiError(sy_api_status c, const std::string& m) : std::runtime_error(m), code(c) {}
};

void check(sy_api_status s) {
  if (s != SY_API_OK) throw ApiError(s, sy_last_error());
}

// The exception classes, created in __init__ of the module (below).
PyObject* g_errors[16] = {};

std::string copy_out(const std::function<sy_api_status(char*, int64_t, int64_t*)>& call) {
  std::string out(1024, '\0');
  int64_t n = 0;
  check(call(out.data(), static_cast<int64_t>(out.size()), &n));
  if (n > static_cast<int64_t>(out.size())) {
    out.assign(static_cast<size_t>(n), '\0');
    check(call(out.data(), n, &n));
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

// ---- tokenizer

class Tokenizer {
 public:
  // Owning (opened on its own) or borrowed from an engine (which outlives it:
  // the Python Engine keeps a reference).
  explicit Tokenizer(const std::string& path, std::optional<std::string> chat_template) : owned_(true) {
    sy_tokenizer* t = nullptr;
    {
      nb::gil_scoped_release release;
      check(sy_tokenizer_open(path.c_str(), chat_template ? chat_template->c_str() : nullptr, &t));
    }
    t_ = t;
  }
  Tokenizer(const sy_tokenizer* borrowed, std::shared_ptr<bool> engine_open) : t_(borrowed), owned_(false), open_(std::move(engine_open)) {}
  ~Tokenizer() {
    if (owned_) sy_tokenizer_close(const_cast<sy_tokenizer*>(t_));
  }
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  void check_open() const {
    if (open_ && !*open_) throw ApiError(SY_API_SHUTTING_DOWN, "the engine this tokenizer belongs to is closed");
  }
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const {
    check_open();
    std::vector<int32_t> ids(text.size() + 16);
    int32_t n = 0;
    check(sy_tokenizer_encode(t_, text.c_str(), add_bos ? 1 : 0, ids.data(), static_cast<int32_t>(ids.size()), &n));
    if (n > static_cast<int32_t>(ids.size())) {
      ids.resize(static_cast<size_t>(n));
      check(sy_tokenizer_encode(t_, text.c_str(), add_bos ? 1 : 0, ids.data(), n, &n));
    }
    ids.resize(static_cast<size_t>(n));
    return ids;
  }
  nb::bytes decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
    check_open();
    const std::string s = copy_out([&](char* out, int64_t cap, int64_t* n) {
      return sy_tokenizer_decode(t_, ids.data(), static_cast<int32_t>(ids.size()), skip_special ? 1 : 0, out, cap, n);
    });
    return nb::bytes(s.data(), s.size());
  }
  std::string chat_render(const std::string& request_json) const {
    check_open();
    return copy_out([&](char* out, int64_t cap, int64_t* n) { return sy_tokenizer_chat_render(t_, request_json.c_str(), out, cap, n); });
  }
  int32_t vocab_size() const {
    check_open();
    return sy_tokenizer_vocab_size(t_);
  }

 private:
  const sy_tokenizer* t_;
  bool owned_;
  std::shared_ptr<bool> open_;  // borrowed: whether the engine still exists
};

// ---- requests

struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;  // not yet taken
  std::string text;             // not yet taken
  size_t total_tokens = 0;
  size_t streamed_bytes = 0;  // text delivered by on_token so far
  bool finished = false;
  bool tail_taken = false;
  sy_request_info info{};
  std::string error;
  int event_fd = -1;  // asyncio: written on every change

  void wake() {
    cv.notify_all();
    if (event_fd >= 0) {
      const uint64_t one = 1;
      ssize_t w = ::write(event_fd, &one, sizeof one);
      (void)w;  // a full counter is still readable: the loop wakes either way
    }
  }
  ~RequestState() {
    if (event_fd >= 0) ::close(event_fd);
  }
};

// The engine's callbacks: on the engine thread, no Python.
void on_token(void* user, int32_t token, const char* text) {
  auto& st = **static_cast<std::shared_ptr<RequestState>*>(user);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.tokens.push_back(token);
    const size_t n = std::strlen(text);
    st.text.append(text, n);
    st.streamed_bytes += n;
    ++st.total_tokens;
  }
  st.wake();
}

void on_finish(void* user, const sy_request_info* info) {
  auto* holder = static_cast<std::shared_ptr<RequestState>*>(user);
  std::shared_ptr<RequestState> st = *holder;
  delete holder;  // the engine's reference: on_finish is its last call
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->info = *info;
    st->error = info->error ? info->error : "";
    st->finished = true;
  }
  st->wake();
}

const char* finish_name(int32_t r) {
  switch (r) {
    case SY_FINISH_STOP: return "stop";
    case SY_FINISH_LENGTH: return "length";
    case SY_FINISH_CONTEXT: return "context";
    case SY_FINISH_CANCELLED: return "cancelled";
    case SY_FINISH_TIMEOUT: return "timeout";
    case SY_FINISH_ERROR: return "error";
    default: return "";
  }
}

class Request {
 public:
  Request(sy_request* r, std::shared_ptr<RequestState> st) : r_(r), st_(std::move(st)) {}
  ~Request() { sy_request_release(r_); }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Blocks (GIL released) until new output or the end, or timeout seconds
  // (< 0: no limit). Returns (new token ids, new text, finished).
  nb::tuple next(double timeout) {
    std::vector<int32_t> tokens;
    std::string text;
    bool finished;
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(st_->mu);
      auto ready = [&] { return st_->finished || !st_->tokens.empty(); };
      if (timeout < 0) st_->cv.wait(lock, ready);
      else st_->cv.wait_for(lock, std::chrono::duration<double>(timeout), ready);
      tokens.swap(st_->tokens);
      text.swap(st_->text);
      finished = st_->finished;
    }
    if (finished) text += tail();
    return nb::make_tuple(tokens, nb::bytes(text.data(), text.size()), finished);
  }
  // The whole generated text (stop strings trimmed), as sy_request_copy_text gives it.
  nb::bytes text() {
    const std::string t = full_text();
    return nb::bytes(t.data(), t.size());
  }
  // Non-blocking: (new token ids, new text, finished). For asyncio, after
  // the eventfd became readable (drain it with ack()).
  nb::tuple take() {
    std::vector<int32_t> tokens;
    std::string text;
    bool finished;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      tokens.swap(st_->tokens);
      text.swap(st_->text);
      finished = st_->finished;
    }
    if (finished) text += tail();
    return nb::make_tuple(tokens, nb::bytes(text.data(), text.size()), finished);
  }
  int fileno() const { return st_->event_fd; }

 private:
  std::string full_text() {
    std::string t(256, '\0');
    int32_t n = 0;
    check(sy_request_copy_text(r_, t.data(), static_cast<int32_t>(t.size()), &n));
    if (n > static_cast<int32_t>(t.size())) {
      t.assign(static_cast<size_t>(n) + 1, '\0');
      check(sy_request_copy_text(r_, t.data(), static_cast<int32_t>(t.size()), &n));
    }
    t.resize(static_cast<size_t>(n));
    return t;
  }
  // Once finished: the text the engine held back from streaming until the
  // end (an incomplete character, the start of a stop string that never
  // completed), so the chunks add up to the whole text.
  std::string tail() {
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      if (st_->tail_taken) return {};
      st_->tail_taken = true;
    }
    const std::string t = full_text();
    return t.size() > st_->streamed_bytes ? t.substr(st_->streamed_bytes) : std::string();
  }

 public:
  void ack() {
    uint64_t v;
    ssize_t r = ::read(st_->event_fd, &v, sizeof v);
    (void)r;  // EAGAIN: nothing to drain
  }
  void cancel() { sy_request_cancel(r_); }
  bool finished() {
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->finished;
  }
  nb::dict info() {
    std::lock_guard<std::mutex> lock(st_->mu);
    nb::dict d;
    d["finish_reason"] = finish_name(st_->info.finish_reason);
    d["prompt_tokens"] = st_->info.prompt_tokens;
    d["completion_tokens"] = static_cast<int64_t>(st_->total_tokens);
    d["cached_tokens"] = st_->info.cached_tokens;
    d["ttft_ms"] = st_->info.ttft_ms;
    d["e2e_ms"] = st_->info.e2e_ms;
    d["error"] = st_->error;
    return d;
  }

 private:
  sy_request* r_;
  std::shared_ptr<RequestState> st_;
};

// ---- engine

class Engine {
 public:
  Engine(std::optional<std::string> model, std::optional<std::string> manifest, std::optional<std::string> profile, int threads,
         std::optional<std::string> tokenizer, std::optional<std::string> chat_template) {
    sy_engine_options o{};
    o.struct_size = sizeof o;
    o.manifest = manifest ? manifest->c_str() : nullptr;
    o.profile = profile ? profile->c_str() : nullptr;
    o.model = model ? model->c_str() : nullptr;
    o.threads = threads;
    o.tokenizer = tokenizer ? tokenizer->c_str() : nullptr;
    o.chat_template = chat_template ? chat_template->c_str() : nullptr;
    sy_engine* e = nullptr;
    {
      nb::gil_scoped_release release;
      check(sy_engine_create(&o, &e));
    }
    e_ = e;
  }
  ~Engine() { close(); }
  void close() {
    if (!e_) return;
    *open_ = false;
    nb::gil_scoped_release release;  // waits for the engine thread
    sy_engine_destroy(e_);
    e_ = nullptr;
  }
  std::shared_ptr<bool> open_flag() const { return open_; }
  sy_engine* get() const {
    if (!e_) throw ApiError(SY_API_SHUTTING_DOWN, "the engine is closed");
    return e_;
  }

  Request* submit(const std::vector<int32_t>& prompt, int32_t max_tokens, float temperature, float top_p, int32_t top_k, float min_p,
                  float presence_penalty, float frequency_penalty, float repetition_penalty, uint64_t seed,
                  const std::vector<std::string>& stop, const std::vector<int32_t>& stop_ids, bool ignore_eos, int32_t priority,
                  double timeout_ms, std::optional<std::string> constraint_kind, std::optional<std::string> constraint_spec, bool async_io) {
    if (prompt.empty()) throw ApiError(SY_API_INVALID_ARGUMENT, "the prompt is empty");
    sy_sampling_params sp{};
    sp.struct_size = sizeof sp;
    sp.temperature = temperature;
    sp.top_p = top_p;
    sp.top_k = top_k;
    sp.min_p = min_p;
    sp.presence_penalty = presence_penalty;
    sp.frequency_penalty = frequency_penalty;
    sp.repetition_penalty = repetition_penalty;
    sp.seed = seed;
    std::vector<const char*> stops;
    for (const auto& s : stop) stops.push_back(s.c_str());
    sy_request_params p{};
    p.struct_size = sizeof p;
    p.prompt_ids = prompt.data();
    p.num_prompt_ids = static_cast<int32_t>(prompt.size());
    p.max_tokens = max_tokens;
    p.sampling_params = &sp;
    p.ignore_eos = ignore_eos ? 1 : 0;
    p.stop = stops.data();
    p.num_stop = static_cast<int32_t>(stops.size());
    p.stop_ids = stop_ids.data();
    p.num_stop_ids = static_cast<int32_t>(stop_ids.size());
    p.priority = priority;
    p.timeout_ms = timeout_ms;
    p.constraint_kind = constraint_kind ? constraint_kind->c_str() : nullptr;
    p.constraint_spec = constraint_spec ? constraint_spec->c_str() : nullptr;
    auto st = std::make_shared<RequestState>();
    if (async_io) {
      st->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (st->event_fd < 0) throw ApiError(SY_API_ERROR, std::string("eventfd: ") + std::strerror(errno));
    }
    p.on_token = &on_token;
    p.on_finish = &on_finish;
    auto* holder = new std::shared_ptr<RequestState>(st);
    p.user = holder;
    sy_request* r = nullptr;
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      s = sy_submit(get(), &p, &r);
    }
    if (s != SY_API_OK) {
      delete holder;  // the engine took nothing: on_finish will not run
      check(s);
    }
    return new Request(r, std::move(st));
  }

  nb::ndarray<nb::numpy, float, nb::ndim<2>> logits(const std::vector<int32_t>& ids) {
    const int32_t vocab = sy_engine_vocab_size(get());
    if (vocab <= 0) throw ApiError(SY_API_UNSUPPORTED, "the model's vocabulary size is not static");
    const size_t n = ids.size() * static_cast<size_t>(vocab);
    // The engine writes straight into the array's memory; numpy owns it.
    auto* data = new float[n];
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      s = sy_logits(get(), ids.data(), static_cast<int32_t>(ids.size()), data, static_cast<int64_t>(n));
    }
    check(s);
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, {ids.size(), static_cast<size_t>(vocab)}, owner);
  }

  nb::ndarray<nb::numpy, float, nb::ndim<2>> hidden_states(const std::vector<int32_t>& ids) {
    int32_t dim = 0;
    check(sy_hidden_states(get(), ids.data(), static_cast<int32_t>(ids.size()), nullptr, 0, &dim));
    const size_t n = ids.size() * static_cast<size_t>(dim);
    auto* data = new float[n];
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      s = sy_hidden_states(get(), ids.data(), static_cast<int32_t>(ids.size()), data, static_cast<int64_t>(n), &dim);
    }
    check(s);
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, {ids.size(), static_cast<size_t>(dim)}, owner);
  }

  nb::ndarray<nb::numpy, float, nb::ndim<2>> lm_head(nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> rows) {
    const auto n = static_cast<int32_t>(rows.shape(0)), dim = static_cast<int32_t>(rows.shape(1));
    int32_t vocab = 0;
    check(sy_lm_head(get(), rows.data(), n, dim, nullptr, 0, &vocab));
    const size_t size = static_cast<size_t>(n) * static_cast<size_t>(vocab);
    auto* data = new float[size];
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      s = sy_lm_head(get(), rows.data(), n, dim, data, static_cast<int64_t>(size), &vocab);
    }
    check(s);
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, {static_cast<size_t>(n), static_cast<size_t>(vocab)}, owner);
  }

  nb::dict metrics() const {
    sy_metrics m{};
    m.struct_size = sizeof m;
    check(sy_engine_metrics(get(), &m));
    nb::dict d;
    d["running"] = m.running;
    d["waiting"] = m.waiting;
    d["finished"] = m.finished;
    d["cancelled"] = m.cancelled;
    d["failed"] = m.failed;
    d["prompt_tokens"] = m.prompt_tokens;
    d["generated_tokens"] = m.generated_tokens;
    d["cached_tokens"] = m.cached_tokens;
    d["preemptions"] = m.preemptions;
    d["steps"] = m.steps;
    d["kv_blocks_total"] = m.kv_blocks_total;
    d["kv_blocks_used"] = m.kv_blocks_used;
    d["spec_drafts"] = m.spec_drafts;
    d["spec_draft_tokens"] = m.spec_draft_tokens;
    d["spec_accepted_tokens"] = m.spec_accepted_tokens;
    d["constrained_requests"] = m.constrained_requests;
    d["constraint_refusals"] = m.constraint_refusals;
    d["constraint_compile_ms"] = m.constraint_compile_ms;
    d["constraint_mask_ms"] = m.constraint_mask_ms;
    d["constraint_mask_rows"] = m.constraint_mask_rows;
    return d;
  }

  void kv_events_enable(int32_t capacity) { check(sy_kv_events_enable(get(), capacity)); }
  // [(kind, sequence, block_hash, parent_hash, tokens, device, timestamp)]
  nb::list kv_events_poll(int32_t max) {
    const sy_kv_event* const* events = nullptr;
    int32_t n = 0;
    check(sy_kv_events_poll(get(), max, &events, &n));
    nb::list out;
    for (int32_t i = 0; i < n; ++i) {
      const sy_kv_event* e = events[i];
      std::vector<int32_t> tokens(e->tokens, e->tokens + e->num_tokens);
      out.append(nb::make_tuple(e->kind, e->sequence, e->block_hash, e->parent_hash, tokens, e->device, e->timestamp));
    }
    return out;
  }
  nb::bytes kv_export(const std::vector<int32_t>& ids) {
    std::string out;
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      int64_t size = 0;
      s = sy_kv_export(get(), ids.data(), static_cast<int32_t>(ids.size()), nullptr, 0, &size);
      // The cache may change between the two calls: retry until it fits.
      while (s == SY_API_OK && size > static_cast<int64_t>(out.size())) {
        out.assign(static_cast<size_t>(size), '\0');
        s = sy_kv_export(get(), ids.data(), static_cast<int32_t>(ids.size()), out.data(), size, &size);
      }
      out.resize(static_cast<size_t>(size));
    }
    check(s);
    return nb::bytes(out.data(), out.size());
  }
  int32_t kv_import(nb::bytes data) {
    int32_t cached = 0;
    const std::string copy(data.c_str(), data.size());
    sy_api_status s;
    {
      nb::gil_scoped_release release;
      s = sy_kv_import(get(), copy.data(), static_cast<int64_t>(copy.size()), &cached);
    }
    check(s);
    return cached;
  }

 private:
  sy_engine* e_ = nullptr;
  std::shared_ptr<bool> open_ = std::make_shared<bool>(true);
};

std::vector<uint64_t> block_hashes(const std::vector<int32_t>& ids, int32_t block_size) {
  std::vector<uint64_t> out(block_size > 0 ? ids.size() / static_cast<size_t>(block_size) : 0);
  int32_t n = 0;
  check(sy_block_hashes(block_size, ids.data(), static_cast<int32_t>(ids.size()), out.data(), static_cast<int32_t>(out.size()), &n));
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "Switchyard's C embedding API (switchyard.h); use the switchyard package, not this module";
  m.attr("API_VERSION") = nb::make_tuple(SY_API_VERSION_MAJOR, SY_API_VERSION_MINOR);

  // One Python exception class per status code, all under switchyard.Error.
  nb::object base = nb::steal(PyErr_NewException("switchyard._core.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = base;
  struct Kind {
    sy_api_status code;
    const char* name;
    PyObject* also;  // a built-in the error also is (except ValueError: yes)
  };
  const Kind kinds[] = {{SY_API_INVALID_ARGUMENT, "InvalidArgument", PyExc_ValueError},
                        {SY_API_NOT_FOUND, "NotFound", PyExc_FileNotFoundError},
                        {SY_API_SHUTTING_DOWN, "ShuttingDown", nullptr},
                        {SY_API_UNSUPPORTED, "Unsupported", nullptr},
                        {SY_API_OUT_OF_MEMORY, "OutOfMemory", PyExc_MemoryError},
                        {SY_API_PLUGIN_FAILURE, "PluginFailure", nullptr},
                        {SY_API_CANCELLED, "Cancelled", nullptr}};
  g_errors[SY_API_ERROR] = base.ptr();
  for (const Kind& k : kinds) {
    nb::object bases = k.also ? nb::make_tuple(base, nb::handle(k.also)) : nb::make_tuple(base);
    nb::object cls = nb::steal(PyErr_NewException((std::string("switchyard._core.") + k.name).c_str(), bases.ptr(), nullptr));
    m.attr(k.name) = cls;
    g_errors[k.code] = cls.ptr();
    cls.inc_ref();  // kept for the life of the process, like the module
  }
  base.inc_ref();
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ApiError& e) {
      PyObject* cls = e.code >= 0 && e.code < 16 && g_errors[e.code] ? g_errors[e.code] : g_errors[SY_API_ERROR];
      nb::object err = nb::steal(PyObject_CallFunction(cls, "s", e.what()));
      if (err.is_valid()) {
        nb::setattr(err, "code", nb::int_(e.code));
        PyErr_SetObject(cls, err.ptr());
      }
    }
  });

  nb::class_<Tokenizer>(m, "Tokenizer")
      .def(nb::init<const std::string&, std::optional<std::string>>(), "path"_a, "chat_template"_a = nb::none())
      .def("encode", &Tokenizer::encode, "text"_a, "add_bos"_a = true)
      .def("decode_bytes", &Tokenizer::decode_bytes, "ids"_a, "skip_special"_a = true)
      .def("chat_render", &Tokenizer::chat_render, "request_json"_a)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size);

  nb::class_<Request>(m, "Request")
      .def("next", &Request::next, "timeout"_a = -1.0)
      .def("take", &Request::take)
      .def("text", &Request::text)
      .def("fileno", &Request::fileno)
      .def("ack", &Request::ack)
      .def("cancel", &Request::cancel)
      .def_prop_ro("finished", &Request::finished)
      .def("info", &Request::info);

  nb::class_<Engine>(m, "Engine")
      .def(nb::init<std::optional<std::string>, std::optional<std::string>, std::optional<std::string>, int, std::optional<std::string>,
                    std::optional<std::string>>(),
           "model"_a = nb::none(), "manifest"_a = nb::none(), "profile"_a = nb::none(), "threads"_a = 0, "tokenizer"_a = nb::none(),
           "chat_template"_a = nb::none())
      .def("close", &Engine::close)
      .def("submit", &Engine::submit, "prompt"_a, "max_tokens"_a, "temperature"_a, "top_p"_a, "top_k"_a, "min_p"_a, "presence_penalty"_a,
           "frequency_penalty"_a, "repetition_penalty"_a, "seed"_a, "stop"_a, "stop_ids"_a, "ignore_eos"_a, "priority"_a, "timeout_ms"_a,
           "constraint_kind"_a.none(), "constraint_spec"_a.none(), "async_io"_a, nb::rv_policy::take_ownership)
      .def("tokenizer",
           [](Engine& e) -> Tokenizer* {
             const sy_tokenizer* t = sy_engine_tokenizer(e.get());
             return t ? new Tokenizer(t, e.open_flag()) : nullptr;
           },
           nb::rv_policy::take_ownership)
      .def("logits", &Engine::logits, "ids"_a)
      .def("hidden_states", &Engine::hidden_states, "ids"_a)
      .def("lm_head", &Engine::lm_head, "rows"_a)
      .def("metrics", &Engine::metrics)
      .def("model_name", [](Engine& e) { return std::string(sy_engine_model_name(e.get())); })
      .def("model_path", [](Engine& e) { return std::string(sy_engine_model_path(e.get())); })
      .def("max_context", [](Engine& e) { return sy_engine_max_context(e.get()); })
      .def("vocab_size", [](Engine& e) { return sy_engine_vocab_size(e.get()); })
      .def("kv_block_size", [](Engine& e) { return sy_engine_kv_block_size(e.get()); })
      .def("chat_template_name", [](Engine& e) { return std::string(sy_engine_chat_template_name(e.get())); })
      .def("sampling_defaults", [](Engine& e) { return std::string(sy_engine_sampling_defaults(e.get())); })
      .def("kv_events_enable", &Engine::kv_events_enable, "capacity"_a)
      .def("kv_events_poll", &Engine::kv_events_poll, "max"_a = 4096)
      .def("kv_export", &Engine::kv_export, "ids"_a)
      .def("kv_import", &Engine::kv_import, "data"_a)
      .def("openai_protocol",
           [](Engine& e, const std::string& model_name, int max_tokens_limit, int max_n) {
             return sy::python::make_openai_protocol(e.get(), e.open_flag(), model_name, max_tokens_limit, max_n);
           },
           "model_name"_a = "", "max_tokens_limit"_a = 4096, "max_n"_a = 8, nb::rv_policy::take_ownership, nb::keep_alive<0, 1>());

  sy::python::bind_openai(m);
  m.def("block_hashes", &block_hashes, "ids"_a, "block_size"_a);
  m.def("default_manifest", [] { return std::string(sy_default_manifest()); });
}
