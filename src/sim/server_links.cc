#include "sim/server_links.h"

#include <algorithm>

namespace gradsync::sim {

ServerLinks::ServerLinks(const ClusterSpec& cluster, const PsPlacement& placement)
    : cluster_(cluster),
      placement_(placement),
      perHost_(std::min(cluster.gpusPerHost, cluster.workers)),
      serverIn_(placement.servers, 0),
      serverOut_(placement.servers, 0) {}

// Co-located server s lives on worker s's host; separate servers have hosts of their own. When
// every worker is on the server's host, only the local link is used.
ServerLinks::Route ServerLinks::routeTo(int server) const {
  const int g = cluster_.gpusPerHost;
  const int host = placement_.colocated ? cluster_.hostOf(server) : cluster_.hosts() + server;
  const int onHost = host < cluster_.hosts() ? std::min(g, cluster_.workers - host * g) : 0;
  const double remote = cluster_.workers - onHost;
  if (remote == 0) return {1, cluster_.localBandwidth, cluster_.localLatency};
  return {remote, cluster_.bandwidth, cluster_.latency};
}

ServerLinks::Push ServerLinks::push(int server, double begin, double bytes) {
  const Route route = routeTo(server);
  const double start = std::max(begin, workersOut_);
  workersOut_ = start + perHost_ * bytes / route.bandwidth;
  serverIn_[server] = std::max(start, serverIn_[server]) + route.remote * bytes / route.bandwidth;
  return {workersOut_, std::max(workersOut_, serverIn_[server]) + route.latency};
}

double ServerLinks::reply(int server, double begin, double bytes) {
  const Route route = routeTo(server);
  const double start = std::max(begin, serverOut_[server]);
  serverOut_[server] = start + route.remote * bytes / route.bandwidth;
  workersIn_ = std::max(start, workersIn_) + perHost_ * bytes / route.bandwidth;
  return std::max(serverOut_[server], workersIn_) + route.latency;
}

}  // namespace gradsync::sim
