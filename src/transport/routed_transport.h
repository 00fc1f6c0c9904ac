// A transport that reaches each peer through one of several transports (shared memory for the
// ranks of this host, TCP for the others) and knows the job's topology. It is what
// gradsync::init connects (job/host_transport.h), and what other modules should expect a
// transport with a topology to be.
//
// Contract: the Transport contract, per peer as its route gives it (every route numbers ranks
// as the job does, so messages of one (sender, tag) stay one ordered stream). A failure of any
// route breaks them all (BreakRelay): once a peer is lost, every operation fails, as the
// contract requires, whichever route it would have taken. abort() aborts every route.
// bytesSent() sums the routes. Thread-safe as its routes are.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "gradsync/topology.h"
#include "gradsync/transport.h"

namespace gradsync {

// Passes one route's failure on to the others. Routes are built before the routed transport
// and given `callbackOf(relay)` as their onBroken callback (it keeps the relay alive); the relay
// then aborts every attached transport, once, and any transport attached after that failure as
// it is attached (a route that broke while another was still connecting). Thread-safe; detach()
// waits for a relay in progress.
class BreakRelay {
 public:
  static std::function<void(std::exception_ptr)> callbackOf(
      const std::shared_ptr<BreakRelay>& relay);
  void attach(Transport* transport);
  // No transport is aborted through this relay any more once it returns.
  void detach();

 private:
  void broken(const std::exception_ptr& error);

  std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<Transport*> transports_;
  bool fired_ = false;
  std::exception_ptr error_;  // the failure it relayed, for transports attached later
  int inFlight_ = 0;
};

class RoutedTransport final : public Transport {
 public:
  // routeOf[peer] indexes `routes` (the own rank's entry too: self-messages take that route).
  // Every route must have the topology's size and this rank.
  RoutedTransport(Topology topology, std::vector<std::unique_ptr<Transport>> routes,
                  std::vector<int> routeOf, std::shared_ptr<BreakRelay> relay);
  ~RoutedTransport() override;

  int rank() const override { return routes_.front()->rank(); }
  int size() const override { return topology_.size(); }
  const TransportOptions& options() const override { return routes_.front()->options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  void abort(std::exception_ptr error) override;
  uint64_t bytesSent() const override;
  const Topology* topology() const override { return &topology_; }

  // The route that reaches `peer` (tests, diagnostics).
  const Transport& routeTo(int peer) const { return *routes_[routeOf_[peer]]; }

 private:
  Transport& route(int peer) const;

  const Topology topology_;
  std::vector<std::unique_ptr<Transport>> routes_;
  const std::vector<int> routeOf_;
  std::shared_ptr<BreakRelay> relay_;
};

// `transport` with a topology attached and nothing else changed (the loopback fabric's ranks,
// an MPI transport with --ranks-per-host): a RoutedTransport of one route.
std::unique_ptr<Transport> withTopology(std::unique_ptr<Transport> transport, Topology topology);

}  // namespace gradsync
