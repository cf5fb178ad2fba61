// Errors inside the core are C++ exceptions of one type; they are converted to
// status codes at every C boundary (plugin ABI, embedding API, CLI exit code).
// The kind says which code: a C caller can tell a missing file from a plugin
// that failed without parsing the message.
#pragma once
#include <stdexcept>
#include <string>

namespace sy {

enum class ErrorKind {
  InvalidArgument,  // bad input: a malformed model, manifest, request or option (the default)
  NotFound,         // a file, component or name that does not exist
  Unsupported,      // valid input this build or model cannot handle (an op without a kernel, a layer that cannot fuse)
  OutOfMemory,      // an allocation or the KV cache could not take it
  PluginFailure,    // a plugin returned an error or broke its contract
  Cancelled,        // the caller cancelled, or the engine is shutting down
};
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::InvalidArgument)
      : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// The kind of any exception: an sy::Error's own, else `fallback`. For sites
// that add context to a message and rethrow.
inline ErrorKind kind_of(const std::exception& e, ErrorKind fallback = ErrorKind::InvalidArgument) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err ? err->kind() : fallback;
}

// Builds the message with operator<< so call sites stay one line:
//   SY_CHECK(rank <= kMaxRank, "tensor '" << name << "' has rank " << rank);
#define SY_THROW_KIND(kind, msg)              \
  do {                                        \
    std::ostringstream sy_os_;                \
    sy_os_ << msg;                            \
    throw ::sy::Error(sy_os_.str(), kind);    \
  } while (0)
#define SY_THROW(msg) SY_THROW_KIND(::sy::ErrorKind::InvalidArgument, msg)
#define SY_CHECK_KIND(cond, kind, msg) \
  do {                                 \
    if (!(cond)) SY_THROW_KIND(kind, msg); \
  } while (0)
#define SY_CHECK(cond, msg) SY_CHECK_KIND(cond, ::sy::ErrorKind::InvalidArgument, msg)

}  // namespace sy

#include <sstream>
