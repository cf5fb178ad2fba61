// Whether the client of a request being answered is still there, for
// answers that are not streamed (a stream finds out from a failed write).
// httplib 0.11 (Debian's) hands handlers no socket, so the socket is found
// by its two ends: the one descriptor of this process connected to the
// request's remote address and port from its local address and port. A
// peer that closed or shut down its side is gone (poll's POLLRDHUP).
// Linux only; elsewhere every client counts as present.
#pragma once
#include <string>

namespace sy::server {

class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // False once the peer has closed the connection (true when the socket
  // was not found: nothing is cancelled on a guess).
  bool client_present() const;

 private:
  int fd_ = -1;
};

}  // namespace sy::server
