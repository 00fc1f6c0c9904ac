#include "transport/routed_transport.h"

#include "common/check.h"
#include "transport/checks.h"

namespace gradsync {

std::function<void(std::exception_ptr)> BreakRelay::callbackOf(
    const std::shared_ptr<BreakRelay>& relay) {
  return [relay](const std::exception_ptr& error) { relay->broken(error); };
}

// A route can break while the others are still connecting, before the routed transport attaches
// them: such a late transport is aborted with that failure as it is attached.
void BreakRelay::attach(Transport* transport) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    transports_.push_back(transport);
    error = error_;
  }
  if (error) transport->abort(error);
}

void BreakRelay::detach() {
  std::unique_lock<std::mutex> lock(mutex_);
  transports_.clear();
  fired_ = true;
  error_ = nullptr;
  idle_.wait(lock, [this] { return inFlight_ == 0; });
}

// abort() of the route that broke returns at once (it is broken already), so calling it on
// every route is simplest; the relay fires once, so the aborts it causes do not come back here.
void BreakRelay::broken(const std::exception_ptr& error) {
  std::vector<Transport*> targets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fired_) return;
    fired_ = true;
    error_ = error;
    targets = transports_;
    ++inFlight_;
  }
  for (Transport* transport : targets) transport->abort(error);
  std::lock_guard<std::mutex> lock(mutex_);
  --inFlight_;
  idle_.notify_all();
}

RoutedTransport::RoutedTransport(Topology topology, std::vector<std::unique_ptr<Transport>> routes,
                                 std::vector<int> routeOf, std::shared_ptr<BreakRelay> relay)
    : topology_(std::move(topology)),
      routes_(std::move(routes)),
      routeOf_(std::move(routeOf)),
      relay_(std::move(relay)) {
  GS_CHECK(!routes_.empty() && static_cast<int>(routeOf_.size()) == topology_.size());
  for (const auto& route : routes_) {
    GS_CHECK(route->size() == topology_.size() && route->rank() == routes_.front()->rank());
  }
  for (int index : routeOf_) GS_CHECK(index >= 0 && index < static_cast<int>(routes_.size()));
  if (relay_) {
    for (const auto& route : routes_) relay_->attach(route.get());
  }
}

RoutedTransport::~RoutedTransport() {
  if (relay_) relay_->detach();
  // Routes close in reverse order of creation: TCP (made last) says goodbye first.
  while (!routes_.empty()) routes_.pop_back();
}

Transport& RoutedTransport::route(int peer) const {
  checkPeerRank(rank(), size(), peer);
  return *routes_[routeOf_[peer]];
}

WorkPtr RoutedTransport::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  return route(peer).send(peer, tag, data, bytes);
}

WorkPtr RoutedTransport::recv(int peer, uint64_t tag, void* data, size_t bytes) {
  return route(peer).recv(peer, tag, data, bytes);
}

void RoutedTransport::abort(std::exception_ptr error) {
  for (const auto& route : routes_) route->abort(error);
}

uint64_t RoutedTransport::bytesSent() const {
  uint64_t total = 0;
  for (const auto& route : routes_) total += route->bytesSent();
  return total;
}

std::unique_ptr<Transport> withTopology(std::unique_ptr<Transport> transport, Topology topology) {
  GS_CHECK(transport->size() == topology.size());
  std::vector<std::unique_ptr<Transport>> routes;
  routes.push_back(std::move(transport));
  std::vector<int> routeOf(topology.size(), 0);
  return std::make_unique<RoutedTransport>(std::move(topology), std::move(routes),
                                           std::move(routeOf), nullptr);
}

}  // namespace gradsync
