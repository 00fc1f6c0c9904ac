#include "job/host_transport.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "transport/routed_transport.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_transport.h"

namespace gradsync {
namespace {

std::string readLink(const char* path) {
  char buffer[256];
  ssize_t n = ::readlink(path, buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "?";
}

std::string readLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "?" : line;
}

uint64_t fileSizeLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return limit.rlim_cur;
}

// What every rank publishes: the settings that must agree, its file size limit, then its host
// identity (the rest of the line, which may hold '|').
std::string entryOf(const HostTransportOptions& options) {
  return fmt::format("{}|{}|{}|{}", options.ranksPerHost, options.sharedMemory ? 1 : 0,
                     fileSizeLimit(), hostIdentity());
}

// The n-th '|'-separated field of an entry, or (last) everything from it on.
std::string fieldOf(const std::string& entry, int n, bool last = false) {
  size_t begin = 0;
  for (int i = 0; i < n; ++i) begin = entry.find('|', begin) + 1;
  return last ? entry.substr(begin) : entry.substr(begin, entry.find('|', begin) - begin);
}

// "rank R has --ranks-per-host 2 but rank 0 has 4" for the first rank whose settings differ.
std::string firstDifference(const std::vector<std::string>& entries) {
  auto settingsOf = [](const std::string& entry) {
    return fieldOf(entry, 0) + "|" + fieldOf(entry, 1);
  };
  const std::string reference = settingsOf(entries[0]);
  for (size_t r = 1; r < entries.size(); ++r) {
    const std::string mine = settingsOf(entries[r]);
    if (mine != reference) {
      return fmt::format("rank {} has --ranks-per-host|--shm {} but rank 0 has {}", r, mine,
                         reference);
    }
  }
  return "";
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

// The mount namespace is left out on purpose: `ip netns exec` gives each process a fresh one
// (to remount /sys) while /dev/shm stays the same file system, which is what matters.
std::string hostIdentity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  struct stat shm {};
  const bool hasShm = ::stat("/dev/shm", &shm) == 0;
  return fmt::format("{} boot {} {} {} shm {}:{}", host,
                     readLine("/proc/sys/kernel/random/boot_id"), readLink("/proc/self/ns/net"),
                     readLink("/proc/self/ns/pid"), hasShm ? shm.st_dev : 0,
                     hasShm ? shm.st_ino : 0);
}

HostsInfo exchangeHosts(Store& store, int rank, int size, const HostTransportOptions& options) {
  const std::string prefix = options.tcp.keyPrefix + "/topo";
  const auto timeout = options.tcp.transport.timeout;
  store.setString(fmt::format("{}/host/{}", prefix, rank), entryOf(options));
  std::string all;
  if (rank == 0) {
    std::vector<std::string> entries;
    for (int r = 0; r < size; ++r) {
      entries.push_back(store.getString(fmt::format("{}/host/{}", prefix, r), timeout));
    }
    const std::string difference = firstDifference(entries);
    all = difference.empty() ? "ok\n" + fmt::format("{}", fmt::join(entries, "\n"))
                             : "error\n" + difference;
    store.setString(prefix + "/all", all);
  } else {
    all = store.getString(prefix + "/all", timeout);
  }
  std::vector<std::string> lines = splitLines(all);
  if (lines.empty() || lines[0] != "ok" || static_cast<int>(lines.size()) != size + 1) {
    throw ConfigError(lines.size() > 1 ? lines[1] : "the ranks' host list is malformed",
                      {.rank = rank,
                       .operation = "startup check",
                       .hint = "start every rank with the same --ranks-per-host and --shm"});
  }
  std::vector<std::string> identities;
  std::vector<uint64_t> limits;
  for (int r = 0; r < size; ++r) {
    identities.push_back(fieldOf(lines[r + 1], 3, /*last=*/true));
    limits.push_back(std::stoull(fieldOf(lines[r + 1], 2)));
  }
  return {Topology::fromHostIds(identities), std::move(limits)};
}

namespace {

// The ranks `rank` reaches through shared memory: those of its logical host that share its real
// host, if every one of them can create its segment (else none: TCP, and a warning with `warn`).
// Every rank of the group computes the same answer from the same facts.
std::vector<int> sharedMemoryGroup(const HostsInfo& hosts, const Topology& logical, int rank,
                                   bool enabled, bool warn) {
  std::vector<int> group;
  for (int peer : logical.localGroup(rank)) {
    if (hosts.real.sameHost(rank, peer)) group.push_back(peer);
  }
  if (!enabled || group.size() < 2) return {};
  const size_t slots = group.size();
  const uint64_t bytes =
      shm::Segment::bytesFor(static_cast<uint32_t>(slots), shm::defaultRingBytes(slots));
  for (int peer : group) {
    if (hosts.fileSizeLimit[peer] < bytes) {
      if (warn) {
        GS_LOG(kWarn,
               "rank {} may not create files of {} bytes (ulimit -f): ranks {} use TCP "
               "instead of shared memory",
               peer, bytes, fmt::join(group, ", "));
      }
      return {};
    }
  }
  return group;
}

// Shared memory only where the ranks of every logical host all reach each other through it:
// the collectives' cost model must be the same on every rank, so one host whose ranks talk over
// TCP makes the whole job's kTcp (the slowest link inside a host sets the model, as a NIC does
// across hosts).
Topology::HostLinks hostLinksOf(const HostsInfo& hosts, const Topology& logical, bool enabled) {
  for (int r = 0; r < logical.size(); ++r) {
    const size_t local = logical.localGroup(r).size();
    if (local >= 2 && sharedMemoryGroup(hosts, logical, r, enabled, false).size() != local) {
      return Topology::HostLinks::kTcp;
    }
  }
  return Topology::HostLinks::kSharedMemory;
}

}  // namespace

std::unique_ptr<Transport> connectHostTransport(Store& store, int rank, int size,
                                                const HostTransportOptions& options) {
  const HostsInfo hosts = exchangeHosts(store, rank, size, options);
  const TransportOptions& link = options.tcp.transport;
  const bool emulatedLink = link.bandwidthBytesPerSec > 0 || link.latency.count() > 0;
  const int ranksPerHost = options.ranksPerHost > 0 ? options.ranksPerHost : emulatedLink ? 1 : 0;
  const Topology placement = ranksPerHost > 0 ? Topology::uniform(size, ranksPerHost) : hosts.real;
  const Topology logical =
      placement.withHostLinks(hostLinksOf(hosts, placement, options.sharedMemory));
  const std::vector<int> locals = sharedMemoryGroup(hosts, logical, rank, options.sharedMemory,
                                                    /*warn=*/true);
  const bool shm = !locals.empty();
  auto relay = std::make_shared<BreakRelay>();
  std::vector<std::unique_ptr<Transport>> routes;
  std::vector<int> routeOf(size, 0);
  if (shm) {
    ShmTransportOptions shmOptions{.transport = options.tcp.transport,
                                   .jobId = options.tcp.jobId,
                                   .keyPrefix = options.tcp.keyPrefix + "/shm",
                                   .onBroken = BreakRelay::callbackOf(relay)};
    routes.push_back(connectShmTransport(store, rank, size, locals, shmOptions));
  }
  if (!shm || static_cast<int>(locals.size()) < size) {
    TcpTransportOptions tcp = options.tcp;
    tcp.onBroken = BreakRelay::callbackOf(relay);
    if (shm) {
      tcp.peers.assign(size, true);
      for (int peer : locals) tcp.peers[peer] = false;
      for (int peer = 0; peer < size; ++peer) routeOf[peer] = tcp.peers[peer] ? 1 : 0;
    }
    routes.push_back(connectTcpTransport(store, rank, size, tcp));
  }
  GS_LOG(kInfo, "rank {}: {}; {} through shared memory", rank, logical.describe(),
         shm ? fmt::format("ranks {}", fmt::join(locals, ", ")) : std::string("none"));
  return std::make_unique<RoutedTransport>(logical, std::move(routes), std::move(routeOf),
                                           std::move(relay));
}

}  // namespace gradsync
