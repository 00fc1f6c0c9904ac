#include "job/rank_context.h"

#include "common/logging.h"
#include "common/socket.h"
#include "job/agreement.h"

namespace gradsync {

RankContext joinJob(const BootstrapConfig& config, const TransportOptions& link) {
  RankContext context;
  context.config = config;
  context.store = connectStore(config, &context.server);
  if (config.size > 1) checkSameWorldSize(*context.store, config);
  TcpTransportOptions tcp;
  tcp.transport = link;
  tcp.transport.timeout = config.timeout;
  tcp.jobId = config.jobId;
  tcp.jobToken = config.jobToken;
  tcp.host = config.size > 1 ? localAddressToward(config.master.host) : "127.0.0.1";
  context.transport = connectTcpTransport(*context.store, config.rank, config.size, tcp);
  GS_LOG(kInfo, "rank {} of {} connected (bootstrap from {})", config.rank, config.size,
         config.source);
  return context;
}

}  // namespace gradsync
