#include "parallel/comm/network_route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = address->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  inet_ntop(address->sa_family, raw, text, sizeof text);
  return text;
}

struct Interfaces {
  Interfaces() {
    if (getifaddrs(&list) != 0) fail("cannot list this host's network interfaces: ", std::strerror(errno));
  }
  ~Interfaces() { freeifaddrs(list); }
  ifaddrs* list = nullptr;
};

bool is_ip(const ifaddrs* entry) {
  return entry->ifa_addr && (entry->ifa_addr->sa_family == AF_INET || entry->ifa_addr->sa_family == AF_INET6);
}

LocalInterface interface_of(const ifaddrs* entry) {
  return {entry->ifa_name, address_text(entry->ifa_addr), (entry->ifa_flags & IFF_LOOPBACK) != 0};
}

}  // namespace

LocalInterface interface_toward(const std::string& host, int port, const std::string& what) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int code = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); code != 0)
    fail(what, "=", host, " does not resolve on this host: ", gai_strerror(code));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);

  // A connected UDP socket has the source address the kernel chose for the route; nothing is sent.
  sockaddr_storage local{};
  std::string destination, why;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    destination = address_text(a->ai_addr);
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    socklen_t length = sizeof local;
    const bool routed = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    why = std::strerror(errno);
    close(fd);
    if (routed) break;
    local.ss_family = AF_UNSPEC;
  }
  if (local.ss_family == AF_UNSPEC)
    fail("no route from this host to ", what, "=", host, " (", destination, "): ", why);

  const std::string source = address_text(reinterpret_cast<const sockaddr*>(&local));
  Interfaces interfaces;
  for (const ifaddrs* entry = interfaces.list; entry; entry = entry->ifa_next)
    if (is_ip(entry) && address_text(entry->ifa_addr) == source) return interface_of(entry);
  // 127.0.1.1 (Debian's address for the host's own name) lies in lo's 127.0.0.0/8 without
  // being listed on it.
  const bool loopback_source = source.rfind("127.", 0) == 0 || source == "::1";
  if (loopback_source)
    for (const ifaddrs* entry = interfaces.list; entry; entry = entry->ifa_next)
      if (is_ip(entry) && (entry->ifa_flags & IFF_LOOPBACK)) return {entry->ifa_name, source, true};
  fail("the route to ", what, "=", host, " leaves from ", source, ", which no interface of this host holds");
}

bool host_answers(const std::string& address, std::chrono::milliseconds within) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  // Port 1 (tcpmux) is almost never served: a live host refuses at once.
  if (getaddrinfo(address.c_str(), "1", &hints, &found) != 0) return false;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  bool answered = false;
  if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    answered = true;
  } else if (errno == EINPROGRESS) {
    pollfd waiting{fd, POLLOUT, 0};
    if (poll(&waiting, 1, int(within.count())) == 1) {
      int error = 0;
      socklen_t length = sizeof error;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      answered = error == 0 || error == ECONNREFUSED;
    }
  } else {
    answered = errno == ECONNREFUSED;
  }
  close(fd);
  return answered;
}

LocalInterface interface_named(const std::string& name, const std::string& what) {
  Interfaces interfaces;
  const ifaddrs* chosen = nullptr;
  std::vector<std::string> names;
  for (const ifaddrs* entry = interfaces.list; entry; entry = entry->ifa_next) {
    if (!is_ip(entry)) continue;
    if (name != entry->ifa_name) {
      if (std::find(names.begin(), names.end(), entry->ifa_name) == names.end()) names.push_back(entry->ifa_name);
      continue;
    }
    if (!chosen || (chosen->ifa_addr->sa_family != AF_INET && entry->ifa_addr->sa_family == AF_INET)) chosen = entry;
  }
  if (!chosen) fail(what, "=", name, " is not an interface of this host with an address (it has: ", join(names, ", "), ")");
  return interface_of(chosen);
}

}  // namespace trident
