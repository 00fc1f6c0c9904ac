// Which ranks of a job share a host: what hierarchical collectives and HiTopKComm follow
// (docs/algorithms.md, "Topology"), and what decides that two ranks talk through shared memory.
//
// A host's ranks form its *local group* (ordered by rank; a rank's index in it is its local
// rank). The ranks with the same local rank on every host form a *cross group* (ordered by
// host). Hosts are numbered in the order of their lowest rank. A topology is *regular* when
// every host has the same number of ranks; hierarchical algorithms need that and fall back to
// flat ones otherwise.
//
// Where it comes from: every rank publishes its host identity at rendezvous (hostname, boot id
// and the network, mount and PID namespaces, so network namespaces emulating hosts count as
// hosts), or `--ranks-per-host N` says that consecutive runs of N ranks share a host. A value
// type: copyable, immutable once built, safe to share between threads.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

class Topology {
 public:
  // How the ranks of one host reach each other: what the collectives' cost model charges a
  // message inside a host (gradsync/hierarchical.h). Shared memory unless the transport says
  // otherwise (a host transport whose ranks on a host talk over TCP loopback: --shm off, or
  // segments it may not create).
  enum class HostLinks { kSharedMemory, kTcp };

  // Every rank on a host of its own (what gradsync assumes without topology information).
  static Topology flat(int size);
  // Consecutive runs of `ranksPerHost` ranks share a host (the last host may have fewer).
  // Throws ConfigError unless size >= 1 and ranksPerHost >= 1.
  static Topology uniform(int size, int ranksPerHost);
  // Ranks with equal identities share a host; identities are indexed by rank.
  static Topology fromHostIds(const std::vector<std::string>& hostIds);
  // host[r] is rank r's host index; hosts must be numbered by their lowest rank (0, then the
  // next unseen, ...). Throws ConfigError otherwise.
  explicit Topology(std::vector<int> hostOf);

  int size() const { return static_cast<int>(hostOf_.size()); }
  int hosts() const { return static_cast<int>(members_.size()); }
  int hostOf(int rank) const { return hostOf_[rank]; }
  // The ranks on `host`, ascending.
  const std::vector<int>& ranksOn(int host) const { return members_[host]; }
  const std::vector<int>& localGroup(int rank) const { return members_[hostOf_[rank]]; }
  int localRank(int rank) const { return localRank_[rank]; }
  int localSize(int rank) const { return static_cast<int>(localGroup(rank).size()); }
  // The ranks with rank's local rank, one per host that has that many ranks, by host.
  std::vector<int> crossGroup(int rank) const;
  bool sameHost(int a, int b) const { return hostOf_[a] == hostOf_[b]; }
  // Every host has the same number of ranks.
  bool regular() const;
  // Ranks per host of a regular topology (else 0).
  int ranksPerHost() const;
  // "2 hosts x 2 ranks", "3 hosts (2, 2, 1 ranks)".
  std::string describe() const;

  HostLinks hostLinks() const { return hostLinks_; }
  // This placement with the ranks of a host reaching each other by `links`.
  Topology withHostLinks(HostLinks links) const;

  // The same placement (whatever the links).
  bool operator==(const Topology& other) const { return hostOf_ == other.hostOf_; }

 private:
  std::vector<int> hostOf_;
  std::vector<std::vector<int>> members_;
  std::vector<int> localRank_;
  HostLinks hostLinks_ = HostLinks::kSharedMemory;
};

}  // namespace gradsync
