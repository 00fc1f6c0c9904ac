// Topology: local and cross groups from host identities, --ranks-per-host, irregular hosts.
#include "gradsync/topology.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

using Ranks = std::vector<int>;

TEST(Topology, UniformHostsHaveLocalAndCrossGroups) {
  const Topology t = Topology::uniform(6, 3);  // hosts {0,1,2} {3,4,5}
  EXPECT_EQ(t.hosts(), 2);
  EXPECT_TRUE(t.regular());
  EXPECT_EQ(t.ranksPerHost(), 3);
  EXPECT_EQ(t.localGroup(4), (Ranks{3, 4, 5}));
  EXPECT_EQ(t.localRank(4), 1);
  EXPECT_EQ(t.localSize(4), 3);
  EXPECT_EQ(t.crossGroup(4), (Ranks{1, 4}));
  EXPECT_EQ(t.crossGroup(0), (Ranks{0, 3}));
  EXPECT_TRUE(t.sameHost(3, 5));
  EXPECT_FALSE(t.sameHost(2, 3));
  EXPECT_EQ(t.describe(), "2 hosts x 3 ranks");
}

TEST(Topology, HostIdentitiesGroupRanksWhereverTheyAre) {
  // Ranks of one host need not be consecutive; hosts are numbered by their lowest rank.
  const Topology t = Topology::fromHostIds({"b", "a", "b", "a"});
  EXPECT_EQ(t.hostOf(0), 0);
  EXPECT_EQ(t.hostOf(1), 1);
  EXPECT_EQ(t.localGroup(2), (Ranks{0, 2}));
  EXPECT_EQ(t.crossGroup(3), (Ranks{2, 3}));
  EXPECT_EQ(t, Topology({0, 1, 0, 1}));
}

TEST(Topology, IrregularHostsAreNotRegular) {
  const Topology t = Topology::uniform(5, 2);  // {0,1} {2,3} {4}
  EXPECT_FALSE(t.regular());
  EXPECT_EQ(t.ranksPerHost(), 0);
  EXPECT_EQ(t.crossGroup(1), (Ranks{1, 3}));  // host 2 has no local rank 1
  EXPECT_EQ(t.crossGroup(4), (Ranks{0, 2, 4}));
  EXPECT_EQ(t.describe(), "3 hosts (2, 2, 1 ranks)");
}

TEST(Topology, FlatAndBadInput) {
  EXPECT_EQ(Topology::flat(3).hosts(), 3);
  EXPECT_EQ(Topology::flat(3).describe(), "3 hosts x 1 rank");
  EXPECT_THROW(Topology::uniform(4, 0), ConfigError);
  EXPECT_THROW(Topology({1, 0}), ConfigError);  // hosts out of order
  EXPECT_THROW(Topology({0, 2}), ConfigError);  // a host skipped
}

}  // namespace
}  // namespace gradsync
