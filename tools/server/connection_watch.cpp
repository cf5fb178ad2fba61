#include "connection_watch.h"

#if defined(__linux__)
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#endif

namespace sy::server {

#if defined(__linux__)
namespace {

// addr:port of a socket end, as httplib writes them (IPv4 dotted, IPv6 plain).
bool end_is(const sockaddr_storage& a, const std::string& addr, int port) {
  char text[INET6_ADDRSTRLEN] = {0};
  int p = -1;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    p = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    p = ntohs(in->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == text;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  if (remote_port < 0 || local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t n = sizeof peer, m = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &n) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &m) != 0) continue;
    if (end_is(peer, remote_addr, remote_port) && end_is(local, local_addr, local_port)) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::client_present() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0;
}

#else

ConnectionWatch::ConnectionWatch(const std::string&, int, const std::string&, int) {}
bool ConnectionWatch::client_present() const { return true; }

#endif

}  // namespace sy::server
