// parallel/comm/network_route.h: the interface that reaches a host, as the kernel routes to it.
#include <gtest/gtest.h>

#include "parallel/comm/network_route.h"
#include "tests/helpers.h"

using namespace trident;
using trident::testing::error_of;

TEST(NetworkRoute, LoopbackAddressesRouteThroughLoopback) {
  for (const std::string host : {"127.0.0.1", "127.0.1.1", "localhost"}) {
    const LocalInterface lo = interface_toward(host, 29500, "MASTER_ADDR");
    EXPECT_TRUE(lo.loopback) << host;
    EXPECT_EQ(lo.address.rfind("127.", 0) == 0 || lo.address == "::1", true) << lo.address;
    EXPECT_EQ(interface_named(lo.name, "GLOO_SOCKET_IFNAME").name, lo.name);
  }
}

TEST(NetworkRoute, UnknownHostsAndInterfacesAreErrorsNamingTheVariable) {
  std::string message = error_of([] { interface_toward("no-such-host.invalid", 29500, "MASTER_ADDR"); });
  EXPECT_EQ(message.rfind("MASTER_ADDR=no-such-host.invalid does not resolve on this host: ", 0), 0u) << message;
  message = error_of([] { interface_named("eth-none", "GLOO_SOCKET_IFNAME"); });
  EXPECT_EQ(message.rfind("GLOO_SOCKET_IFNAME=eth-none is not an interface of this host with an address (it has: ", 0), 0u)
      << message;
  EXPECT_NE(message.find("lo"), std::string::npos) << message;
}

// A live host refuses a connection to a port nobody serves: that is an answer. (A host that gives
// none is a cut link: JobFailure.ACutLinkEndsTheJobAcrossHosts, across simulated hosts; this
// machine's own network may answer for any address.)
TEST(NetworkRoute, ALiveHostAnswers) {
  EXPECT_TRUE(host_answers("127.0.0.1", std::chrono::milliseconds(1000)));
  EXPECT_FALSE(host_answers("not-an-address", std::chrono::milliseconds(300)));
}
