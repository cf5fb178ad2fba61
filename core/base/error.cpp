#include "base/error.h"

namespace sy {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::NotFound: return "not found";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::OutOfMemory: return "out of memory";
    case ErrorKind::PluginFailure: return "plugin failure";
    case ErrorKind::Cancelled: return "cancelled";
  }
  return "error";
}

}  // namespace sy
