// A parameter server: holds the parameters and SGD velocity of the units placement assigns it,
// applies SGD as workers push gradients (dense, CD-SGD's 2-bit codes, or a compressor's encoding
// that it decodes: compress/push_codec.h), and answers each push with the updated parameters
// (P3's fused push-pull). protocol.h has the wire format; docs/algorithms.md, "Parameter server",
// the consistency modes:
//   kSync   BSP: a unit's update is applied once every worker pushed it for the step, with the
//           mean gradient, summed in worker order (not arrival order, so runs repeat bitwise);
//           then every worker that asked gets the new parameters.
//   kAsync  each push is applied at once and answered at once. Per push, the momentum is
//           m^(1/workers) and the learning rate scaled so that a round of pushes of a steady
//           gradient moves the parameters as far as one synchronous step (asyncSgd); a push
//           staler than a round gets a learning rate scaled down by its staleness. With
//           spikeCompensation, the update is Spike Compensation's SC_D with D the push's
//           staleness (optim/delay_compensation.h).
//   kStale  as kAsync, but the answer to a worker's c-th push of a unit is held back until every
//           worker has pushed that unit at least c - staleness times. A worker waits for its
//           answers before the next forward, so no worker runs more than `staleness` steps
//           ahead of the slowest: bounded staleness (SSP), enforced by the server.
//
// Under kAsync and kStale, each reply to a push is followed, on the same reply tag, by a
// PsStaleness message: how stale the push it answers was (protocol.h).
//
// One thread per worker receives that worker's requests; they share the state under one lock
// (a unit's SGD takes microseconds). Threading: construct, then wait() (blocking) or destroy.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "gradsync/transport.h"
#include "optim/update_rule.h"
#include "ps/protocol.h"
#include "ps/served_units.h"

namespace gradsync {

struct ServerOptions {
  enum class Consistency { kSync, kAsync, kStale };
  Consistency consistency = Consistency::kSync;
  int staleness = 0;  // kStale
  double momentum = 0;
  // kAsync, kStale: each push's update is SC_D (Kosson et al.'s Spike Compensation) with D its
  // measured staleness, instead of plain momentum (`--compensate sc` with asgd or ssp).
  bool spikeCompensation = false;
};

class ParameterServer {
 public:
  // Serves, as server `index` of `placement`, the `units` (every unit of the model, by index)
  // placed on it. Starts receiving at once; parameters are zero until a worker sets them
  // (kSetState).
  ParameterServer(Transport& transport, PsPlacement placement, int index,
                  std::vector<ServedUnit> units, ServerOptions options);
  // Waits as wait() does, without rethrowing (call wait() first to see failures).
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  // Blocks until every worker has sent kStop; rethrows the first failure (a lost worker, a
  // malformed request).
  void wait();

 private:
  struct Unit;
  struct PendingReply {
    int worker;
    uint64_t pushes;     // the worker's push count the reply answers
    uint64_t staleness;  // that push's
  };

  void serveWorker(int worker);
  void finish();
  void recordFailure(int worker);  // in a catch block: keeps the first error, stops `worker`
  // Handles one request; returns false for kStop.
  bool handle(int worker, const PsHeader& header, std::vector<uint8_t>& payload);
  void push(int worker, const PsHeader& header, std::span<const uint8_t> payload);
  void applySync(Unit& unit, const PsHeader& header);
  UpdateRule asyncSgd(double lr, uint64_t staleness) const;
  template <typename Ready>
  void waitFor(std::unique_lock<std::mutex>& lock, Unit& unit, Ready ready);
  bool stuck(const Unit& unit) const;  // with the lock held
  void releaseStale(Unit& unit);
  // Sends `snapshot`'s bytes, which the send keeps alive until it completes; with the lock held.
  void reply(int worker, std::shared_ptr<const std::vector<float>> snapshot, uint64_t tag);
  void reply(int worker, std::shared_ptr<const PsStaleness> staleness, uint64_t tag);
  void send(int worker, std::shared_ptr<const void> keepAlive, const void* data, size_t bytes,
            uint64_t tag);
  void reapSends();  // with the lock held
  // Throws ProtocolError for a request whose payload cannot be what it says it is.
  void checkPayload(int worker, const PsHeader& header) const;

  Transport& transport_;
  const PsPlacement placement_;
  const int index_;
  const ServerOptions options_;

  std::mutex mutex_;
  std::vector<std::unique_ptr<Unit>> units_;  // by unit index; null: not placed here
  struct InFlight {
    WorkPtr work;
    std::shared_ptr<const void> buffer;  // what the send reads
  };
  std::vector<InFlight> sends_;  // replies on the wire, with the snapshots they send
  std::vector<bool> stopped_;    // by worker
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace gradsync
