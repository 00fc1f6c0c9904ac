// gradsync::init and Context (include/gradsync/context.h).
#include "gradsync/context.h"

#include "common/env.h"
#include "common/logging.h"
#include "common/socket.h"
#include "gradsync/tcp.h"
#include "job/agreement.h"
#include "job/hang_watch.h"
#include "job/host_transport.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {

Context::Context(BootstrapConfig config, std::unique_ptr<TcpStoreServer> server,
                 std::shared_ptr<Store> store, std::unique_ptr<Transport> transport, int generation)
    : config_(std::move(config)),
      server_(std::move(server)),
      store_(std::move(store)),
      transport_(std::move(transport)),
      generation_(generation) {}

Context::Context(Context&&) noexcept = default;

Context& Context::operator=(Context&& other) noexcept {
  if (this == &other) return *this;
  watch_.reset();  // it aborts transport_ when a member hangs: it must go before transport_ does
  config_ = std::move(other.config_);
  server_ = std::move(other.server_);
  store_ = std::move(other.store_);
  transport_ = std::move(other.transport_);
  watch_ = std::move(other.watch_);
  generation_ = other.generation_;
  return *this;
}

Context::~Context() = default;

TcpTransportOptions tcpOptionsFor(const BootstrapConfig& config, const TransportOptions& link) {
  TcpTransportOptions tcp;
  tcp.transport = link;
  tcp.transport.timeout = config.timeout;
  tcp.jobId = config.jobId;
  tcp.jobToken = config.jobToken;
  tcp.tls = config.tls;
  tcp.host = config.size > 1 ? localAddressToward(config.master.host) : "127.0.0.1";
  return tcp;
}

Context join(const BootstrapConfig& config, const TransportOptions& link) {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store = connectStore(config, &server);
  if (config.size > 1) checkSameWorldSize(*store, config);
  HostTransportOptions options{.sharedMemory = config.sharedMemory,
                               .ranksPerHost = config.ranksPerHost};
  options.tcp = tcpOptionsFor(config, link);
  std::unique_ptr<Transport> transport =
      connectHostTransport(*store, config.rank, config.size, options);
  GS_LOG(kInfo, "rank {} of {} connected (bootstrap from {})", config.rank, config.size,
         config.source);
  return Context(config, std::move(server), std::move(store), std::move(transport));
}

Context init(const InitOptions& options) {
  Env env = Env::fromProcess();
  setLogLevel(env.logLevel);
  return join(resolveBootstrap(options.bootstrap, env), options.link);
}

}  // namespace gradsync
