// What an elastic worker needs besides the rendezvous (job/elastic_rendezvous.h), shared by
// `gradsync train --elastic` (torch/elastic/trainer.cc) and ElasticSession (gradsync/elastic.h).
// Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gradsync/bootstrap.h"
#include "gradsync/store.h"
#include "gradsync/transport.h"
#include "job/elastic_rendezvous.h"

namespace gradsync {

// This process as a worker entering rounds: launch slot `slot`, named "worker 2 (restart 1)",
// "pid 4242 on host-a", with its launch's `settings` (encodeSettings).
ElasticWorker thisWorker(int slot, int restartCount, std::string settings);

// Connects this member to the others of its round `m`, as a fixed job connects
// (job/host_transport.h): shared memory between members on one host (unless `config`'s
// sharedMemory is off or `link` emulates a network), TCP between hosts, with the job's identity,
// TLS, timeout and link, under store keys of the round's own. Blocking, bounded by the timeout;
// every member of the round must call it. Throws as connectHostTransport does.
std::unique_ptr<Transport> connectRoundMesh(Store& store, const ElasticMembership& m,
                                            const BootstrapConfig& config,
                                            const TransportOptions& link);

// rendezvous.join(round, me); when the store is lost, the PeerLostError says whose it was
// (`servesStore`: this worker serves it itself), and for a worker that trained in a round before
// (me.lastRound >= 0) that it is cut off from the job (a network partition, or the store's host
// is down).
ElasticMembership joinRound(ElasticRendezvous& rendezvous, int64_t round, const ElasticWorker& me,
                            const BootstrapConfig& config, bool servesStore);

}  // namespace gradsync
