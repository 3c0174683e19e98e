// Which local interface reaches a host: the one the kernel would route a packet to it through.
// Gloo binds each rank to one interface and advertises that address to its peers, so it must be
// one the peers can reach; the route to MASTER_ADDR is the interface the store already uses.
#pragma once

#include <chrono>
#include <string>

namespace trident {

struct LocalInterface {
  std::string name;     // "eth0", "lo"
  std::string address;  // this host's address on it, "10.0.0.2"
  bool loopback = false;
};

// The interface (and source address) this host would use to send to `host`:`port`, found by
// connecting a UDP socket (no packet is sent) and matching its local address among the
// interfaces. Throws Error naming `what` (e.g. "MASTER_ADDR") when `host` does not resolve or
// nothing routes to it.
LocalInterface interface_toward(const std::string& host, int port, const std::string& what);

// Whether `address` answers a TCP connection attempt within `within`: a connection, or a refusal
// (its host is up and routes back), is an answer; silence or "unreachable" is none.
bool host_answers(const std::string& address, std::chrono::milliseconds within);

// The interface called `name` and its first IPv4 (else IPv6) address; throws Error naming `what`
// (e.g. "GLOO_SOCKET_IFNAME") when this host has no such interface with an address.
LocalInterface interface_named(const std::string& name, const std::string& what);

}  // namespace trident
