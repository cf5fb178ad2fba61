// Errors inside the core are C++ exceptions of one type; they are converted to
// status codes at every C boundary (plugin ABI, embedding API, CLI exit code).
#pragma once
#include <stdexcept>
#include <string>

namespace sy {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Builds the message with operator<< so call sites stay one line:
//   SY_CHECK(rank <= kMaxRank, "tensor '" << name << "' has rank " << rank);
#define SY_THROW(msg)                         \
  do {                                        \
    std::ostringstream sy_os_;                \
    sy_os_ << msg;                            \
    throw ::sy::Error(sy_os_.str());          \
  } while (0)
#define SY_CHECK(cond, msg) \
  do {                      \
    if (!(cond)) SY_THROW(msg); \
  } while (0)

}  // namespace sy

#include <sstream>
