// The parameter servers' links as FIFO timelines (docs/simulator.md, "Network model"): a NIC
// carries one transfer after another, so pushes queue behind pushes and replies behind replies.
// Workers are alike and push every unit at once, so one timeline stands for every worker's NIC
// (each way) and one per server for the server's NIC. Not thread-safe.
#pragma once

#include <vector>

#include "ps/protocol.h"
#include "sim/cluster.h"

namespace gradsync::sim {

class ServerLinks {
 public:
  ServerLinks(const ClusterSpec& cluster, const PsPlacement& placement);

  struct Push {
    double sent = 0;     // this worker's NIC has sent its host's copies (it may push again)
    double arrived = 0;  // the server's NIC has taken every remote worker's copy
  };
  // Every worker pushes `bytes` of a unit to `server`, from `begin` on.
  Push push(int server, double begin, double bytes);
  // The server answers every worker with `bytes`, from `begin` on; returns when the reply is in.
  double reply(int server, double begin, double bytes);

 private:
  struct Route {
    double remote = 0;  // workers not on the server's host (each sends it a copy)
    double bandwidth = 0;
    double latency = 0;
  };
  Route routeTo(int server) const;

  const ClusterSpec cluster_;
  const PsPlacement placement_;
  const double perHost_;  // workers sharing one worker NIC
  double workersOut_ = 0;
  double workersIn_ = 0;
  std::vector<double> serverIn_;
  std::vector<double> serverOut_;
};

}  // namespace gradsync::sim
