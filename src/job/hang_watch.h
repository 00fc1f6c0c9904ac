// Hang detection for a round of an elastic job (docs/cluster.md, "Elastic workers").
//
// A worker that is alive and connected but runs nothing (SIGSTOP, a frozen VM, a host swapping)
// fails no link: without this its peers notice only when their wait for its share of a step
// reaches --timeout, which must stay above the slowest step. A HangWatch gives each member a
// thread that, every bound/4, counts a heartbeat of its own in the job's store and reads the
// count of the next rank of the round (ring order: two store requests per member per period,
// whatever the round's size). A count that has not moved for `bound` names that member hung:
// onHung gets a TimeoutError saying so (its context's peer is that rank), once, and the watch
// beats on without watching; the caller aborts the round's transport, which fails every
// member's round, and the job re-forms without the hung worker. A slow step does not look hung:
// the heartbeats come from a thread of their own. Blocking: the destructor waits for the thread,
// which may be in a store request (bounded by the store's timeout).
//
// A watcher whose own thread was held up for more than half the bound (it was stopped itself,
// or starved) restarts its clock instead of naming anyone: it cannot tell who stood still. A
// member that leaves the round normally (the destructor) marks its count as left: the member
// watching it stops, rather than naming it hung.
//
// Thread-safety: construct and destroy on one thread; onHung runs on the watch's thread, at
// most once, and must not destroy the watch. The store must outlive the watch.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gradsync/store.h"
#include "gradsync/transport.h"
#include "job/elastic_rendezvous.h"

namespace gradsync {

class HangWatch {
 public:
  // `rank` of a round of `size` members (size >= 2); `watched` names rank (rank + 1) % size in
  // messages ("rank 2 (worker 2, pid 4242 on host-a)"). Starts the thread.
  HangWatch(Store& store, int64_t round, int rank, int size, std::string watched,
            std::chrono::milliseconds bound, std::function<void(std::exception_ptr)> onHung);
  // Marks this member as left (one store request; a lost store is ignored) and joins the thread.
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

 private:
  void watch();
  // One period: counts this member's heartbeat and, while watching, reads the watched count.
  void beat(std::chrono::steady_clock::time_point now);

  Store& store_;
  const int64_t round_;
  const int rank_;
  const int size_;
  const std::string mine_;
  const std::string theirs_;
  const std::string watched_;
  const std::chrono::milliseconds bound_;
  const std::function<void(std::exception_ptr)> onHung_;

  bool watching_ = true;  // until the watched member is named, or left
  int64_t lastCount_ = -1;
  std::chrono::steady_clock::time_point lastChange_;
  std::chrono::steady_clock::time_point lastCheck_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;     // last: started once every member above is set
};

// The watch of this member of round `m` over the next rank, which aborts `transport` (the round's)
// when that rank hangs; null when the round has one member or `bound` is 0. Destroy it before
// the transport.
std::unique_ptr<HangWatch> watchRound(Store& store, const ElasticMembership& m,
                                      std::chrono::milliseconds bound, Transport& transport);

}  // namespace gradsync
