#include "connection_watch.h"

#if defined(__linux__)
#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#endif

namespace sy::server {

#if defined(__linux__)
namespace {

// An address as 16 bytes: IPv6 as is, IPv4 as its IPv4-mapped IPv6 form
// (how a dual-stack listener's tcp6 table holds IPv4 peers).
using Address = std::array<unsigned char, 16>;

Address mapped_v4(const unsigned char* v4) {
  Address a{};
  a[10] = a[11] = 0xff;
  std::memcpy(a.data() + 12, v4, 4);
  return a;
}

bool parse_text(const std::string& text, Address& out) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, text.c_str(), buf) == 1) {
    out = mapped_v4(buf);
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), buf) == 1) {
    std::memcpy(out.data(), buf, 16);
    return true;
  }
  return false;
}

// "0100007F:1F90" (tcp) or 32 hex digits ":port" (tcp6). The kernel prints
// each 32-bit word of the address as the number its bytes make in host
// order, so copying the number back gives the bytes in network order.
bool parse_table_end(const std::string& field, Address& addr, int& port) {
  const size_t colon = field.find(':');
  if (colon == std::string::npos || (colon != 8 && colon != 32)) return false;
  unsigned char bytes[16];
  for (size_t w = 0; w < colon / 8; ++w) {
    const uint32_t word = static_cast<uint32_t>(std::strtoul(field.substr(w * 8, 8).c_str(), nullptr, 16));
    std::memcpy(bytes + w * 4, &word, 4);
  }
  if (colon == 8) addr = mapped_v4(bytes);
  else std::memcpy(addr.data(), bytes, 16);
  port = static_cast<int>(std::strtol(field.c_str() + colon + 1, nullptr, 16));
  return true;
}

// The inode of the connection local -> remote, or "" if neither table has it.
std::string connection_inode(const Address& local, int local_port, const Address& remote, int remote_port) {
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local_end, remote_end, skip, inode;
      fields >> slot >> local_end >> remote_end;
      for (int i = 0; i < 6; ++i) fields >> skip;  // st tx:rx tr:when retrnsmt uid timeout
      fields >> inode;
      Address la{}, ra{};
      int lp = -1, rp = -1;
      if (!parse_table_end(local_end, la, lp) || !parse_table_end(remote_end, ra, rp)) continue;
      if (lp == local_port && rp == remote_port && la == local && ra == remote) return inode;
    }
  }
  return {};
}

// The descriptor whose /proc/self/fd link reads "socket:[inode]".
int descriptor_of(const std::string& inode) {
  const std::string target = "socket:[" + inode + "]";
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    char link[64] = {0};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
    if (n > 0 && target == std::string(link, static_cast<size_t>(n))) {
      found = std::atoi(e->d_name);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  Address local{}, remote{};
  if (local_port < 0 || remote_port < 0 || !parse_text(local_addr, local) || !parse_text(remote_addr, remote)) return;
  const std::string inode = connection_inode(local, local_port, remote, remote_port);
  if (!inode.empty() && inode != "0") fd_ = descriptor_of(inode);
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
