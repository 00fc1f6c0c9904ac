// The views the trainer puts over a transport (the workers' prefix, an operation's byte counter)
// keep the hosts the transport knows: without them hierarchical collectives and hitopk would run
// flat behind the view (torch_test's TrainerOnHosts shows it in training).
#include <gtest/gtest.h>

#include <memory>

#include "gradsync/loopback.h"
#include "gradsync/topology.h"
#include "transport/counting_transport.h"
#include "transport/prefix_transport.h"
#include "transport/routed_transport.h"

namespace gradsync {
namespace {

// Rank 0 of 5 ranks on hosts {0, 1}, {2, 3}, {4}; no topology when `hosts` is false.
std::unique_ptr<Transport> rankZeroOfFive(LoopbackFabric& fabric, bool hosts) {
  std::unique_ptr<Transport> transport = fabric.connect(0);
  return hosts ? withTopology(std::move(transport), Topology::uniform(5, 2)) : std::move(transport);
}

TEST(TransportViews, PrefixKeepsTheHostsOfItsRanks) {
  LoopbackFabric fabric(5);
  std::unique_ptr<Transport> whole = rankZeroOfFive(fabric, true);
  PrefixTransport workers(*whole, 4);  // the fifth rank a parameter server
  ASSERT_NE(workers.topology(), nullptr);
  EXPECT_EQ(*workers.topology(), Topology::uniform(4, 2));
  EXPECT_EQ(workers.topology()->describe(), "2 hosts x 2 ranks");
  PrefixTransport three(*whole, 3);  // an irregular prefix: hierarchical algorithms run flat
  EXPECT_EQ(three.topology()->describe(), "2 hosts (2, 1 ranks)");
  EXPECT_FALSE(three.topology()->regular());
  PrefixTransport all(*whole, 5);
  EXPECT_EQ(*all.topology(), *whole->topology());
}

TEST(TransportViews, PrefixOfATransportWithoutHostsHasNone) {
  LoopbackFabric fabric(5);
  std::unique_ptr<Transport> whole = rankZeroOfFive(fabric, false);
  EXPECT_EQ(PrefixTransport(*whole, 4).topology(), nullptr);
}

TEST(TransportViews, CountingPassesTheTopologyThrough) {
  LoopbackFabric fabric(5);
  std::unique_ptr<Transport> whole = rankZeroOfFive(fabric, true);
  EXPECT_EQ(CountingTransport(*whole).topology(), whole->topology());
  LoopbackFabric other(5);
  std::unique_ptr<Transport> bare = rankZeroOfFive(other, false);
  EXPECT_EQ(CountingTransport(*bare).topology(), nullptr);
}

}  // namespace
}  // namespace gradsync
