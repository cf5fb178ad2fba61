// Whether the client of a request being answered is still there, for
// answers that are not streamed (a stream finds out from a failed write).
// httplib 0.11 (Debian's) hands handlers no socket, so the socket is found
// by its two ends: the kernel's TCP table (/proc/self/net/tcp, tcp6) gives
// the inode of the connection from the request's local to its remote
// address, and /proc/self/fd names the descriptor of that inode. Only
// paths are read on the way, never another connection's descriptor: those
// belong to other worker threads. A peer that closed or shut down its side
// is gone (poll's POLLRDHUP). Linux only; elsewhere every client counts as
// present.
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
