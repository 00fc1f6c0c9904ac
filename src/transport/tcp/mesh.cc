#include "transport/tcp/mesh.h"

#include <sys/socket.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tls_link.h"

namespace gradsync::tcp {
namespace {

using Links = std::vector<std::unique_ptr<Link>>;

constexpr const char* kSameTls = "start every rank with the same --tls setting (GRADSYNC_TLS)";

std::string addressKey(const MeshConfig& config, int rank) {
  return fmt::format("{}/addr/{}", config.keyPrefix, rank);
}

// What a connection from rank `connector` to rank `acceptor` binds its proofs to, besides the
// job and both nonces: the ranks and the world size.
std::string bindingOf(int connector, int acceptor, int size) {
  return fmt::format("{}>{}/{}", connector, acceptor, size);
}

[[noreturn]] void refusedBy(int peer, AckStatus status, ErrorContext context) {
  if (status == AckStatus::kTlsMismatch) {
    context.hint = kSameTls;
    throw ProtocolError(fmt::format("rank {} uses --tls but this rank does not", peer), context);
  }
  context.hint =
      "every process of a job needs the same GRADSYNC_JOB_ID, GRADSYNC_JOB_TOKEN and world size";
  throw ProtocolError(fmt::format("rank {} refused the handshake: {}", peer, ackStatusText(status)),
                      context);
}

// Hello, then the acceptor's challenge, checked before this side's proof goes out: a peer
// without the token never sees it (common/auth.h).
void proveToAcceptor(Link& link, const MeshConfig& config, int peer, const Deadline& deadline,
                     const ErrorContext& context) {
  const auth::Nonce mine = auth::freshNonce();
  std::vector<uint8_t> hello = encodeHello({config.rank, config.size, config.jobId, mine});
  link.sendAll(hello.data(), hello.size(), deadline);
  uint8_t bytes[kChallengeBytes];
  link.recvAll(bytes, kChallengeBytes, deadline);
  Challenge challenge;
  if (std::string error = decodeChallenge(bytes, &challenge); !error.empty()) {
    throw ProtocolError(error, context);
  }
  if (challenge.status != AckStatus::kOk) refusedBy(peer, challenge.status, context);
  const std::string binding = bindingOf(config.rank, peer, config.size);
  const std::string channel = link.channelBinding();
  const auth::Exchange exchange{.jobId = config.jobId,
                                .binding = binding,
                                .initiator = mine,
                                .responder = challenge.nonce,
                                .channel = channel};
  ProofMessage answer;
  if (!auth::verify(config.jobToken, auth::kMeshAcceptor, exchange, challenge.proof)) {
    answer.status = AckStatus::kWrongToken;
  } else {
    answer.proof = auth::prove(config.jobToken, auth::kMeshConnector, exchange);
  }
  uint8_t out[kProofMessageBytes];
  encodeProof(answer, out);
  link.sendAll(out, sizeof out, deadline);
  if (answer.status != AckStatus::kOk) refusedBy(peer, answer.status, context);
  uint8_t ack[kAckBytes];
  link.recvAll(ack, sizeof ack, deadline);
  AckStatus status{};
  if (std::string error = decodeAck(ack, &status); !error.empty()) {
    throw ProtocolError(error, context);
  }
  if (status != AckStatus::kOk) refusedBy(peer, status, context);
}

std::unique_ptr<Link> connectToPeer(Store& store, const MeshConfig& config, const TlsContext* tls,
                                    int peer, const Deadline& deadline) {
  ErrorContext context{.rank = config.rank, .peer = peer, .operation = "tcp connect"};
  std::string text = store.getString(addressKey(config, peer), config.timeout);
  Fd fd = connectTcp(SocketAddress::parse(text, addressKey(config, peer)), deadline);
  if (tls != nullptr) context.hint = kSameTls;  // for a TLS handshake that fails
  std::unique_ptr<Link> link = tls != nullptr ? connectTls(std::move(fd), *tls, deadline, context)
                                              : std::make_unique<PlainLink>(std::move(fd));
  context.hint.clear();
  try {
    proveToAcceptor(*link, config, peer, deadline, context);
  } catch (const TimeoutError& e) {  // the socket helpers know the address, not the rank
    throw TimeoutError(e.detail(), context);
  } catch (const PeerLostError& e) {
    throw PeerLostError(e.detail(), context);
  }
  return link;
}

AckStatus checkHello(const Hello& hello, const std::string& jobId, const MeshConfig& config,
                     const Links& peers) {
  if (jobId != config.jobId) return AckStatus::kWrongJob;
  if (hello.size != config.size || hello.rank <= config.rank || hello.rank >= config.size ||
      !config.wants(hello.rank)) {
    return AckStatus::kBadRank;
  }
  if (peers[hello.rank]) return AckStatus::kDuplicateRank;
  return AckStatus::kOk;
}

// Why this rank refused a connection for using TLS on one side only: logged at once, and kept
// for the timeout error should the real peer never come.
struct Refusals {
  std::string tlsMismatch;
  void note(std::string why) {
    GS_LOG(kError, "{}", why);
    tlsMismatch = std::move(why);
  }
};

void sendMismatch(Link& link, const Deadline& deadline) {
  uint8_t out[kChallengeBytes];
  encodeChallenge({.status = AckStatus::kTlsMismatch}, out);
  link.sendAll(out, sizeof out, deadline);
}

// A TLS ClientHello where a Hello should be. The rest of it is read before the answer so that
// closing the socket ends it with a FIN (unread bytes would make it a reset, which may destroy
// the answer before the peer reads it).
void refuseTlsPeer(Link& link, const std::string& name, const Deadline& deadline,
                   Refusals& refusals) {
  uint8_t rest[4096];
  while (::recv(link.fd(), rest, sizeof rest, MSG_DONTWAIT) > 0) {
  }
  sendMismatch(link, deadline);
  refusals.note(
      fmt::format("{} connected with TLS but this rank does not use --tls: {}", name, kSameTls));
}

// This rank's TLS server found a plaintext Hello: answers in plaintext, naming the rank.
void refusePlaintextPeer(Fd fd, const std::string& name, const Deadline& deadline,
                         Refusals& refusals) {
  PlainLink link(std::move(fd));
  uint8_t fixed[kHelloFixedBytes];
  link.recvAll(fixed, sizeof fixed, deadline);
  Hello hello;
  size_t idLength = 0;
  std::string who = decodeHelloFixed(fixed, &hello, &idLength).empty()
                        ? fmt::format("rank {} ({})", hello.rank, name)
                        : name;
  std::string jobId(std::min(idLength, kMaxHelloField), '\0');
  link.recvAll(jobId.data(), jobId.size(), deadline);
  sendMismatch(link, deadline);
  refusals.note(
      fmt::format("{} connected without TLS but this rank uses --tls: {}", who, kSameTls));
}

// Reads and checks one connector's handshake. Returns the peer's rank, or -1 after logging why
// it was refused.
int admit(Link& link, const MeshConfig& config, const Links& peers, const Deadline& deadline,
          Refusals& refusals) {
  const std::string name = peerName(link.fd());  // before the peer can hang up
  uint8_t fixed[kHelloFixedBytes];
  link.recvAll(fixed, sizeof fixed, deadline);
  if (!link.secure() && looksLikeTls(fixed, sizeof fixed)) {
    refuseTlsPeer(link, name, deadline, refusals);
    return -1;
  }
  Hello hello;
  size_t idLength = 0;
  if (std::string error = decodeHelloFixed(fixed, &hello, &idLength); !error.empty()) {
    GS_LOG(kError, "refused connection from {}: {}", name, error);
    return -1;
  }
  std::string jobId(idLength, '\0');
  link.recvAll(jobId.data(), jobId.size(), deadline);
  auto refuse = [&](AckStatus status) {
    GS_LOG(kError, "refused connection from {} claiming rank {}: {}", name, hello.rank,
           ackStatusText(status));
    return -1;
  };
  Challenge challenge{.status = checkHello(hello, jobId, config, peers),
                      .nonce = auth::freshNonce()};
  const std::string binding = bindingOf(hello.rank, config.rank, config.size);
  const std::string channel = link.channelBinding();
  const auth::Exchange exchange{.jobId = config.jobId,
                                .binding = binding,
                                .initiator = hello.nonce,
                                .responder = challenge.nonce,
                                .channel = channel};
  if (challenge.status == AckStatus::kOk) {
    challenge.proof = auth::prove(config.jobToken, auth::kMeshAcceptor, exchange);
  }
  uint8_t out[kChallengeBytes];
  encodeChallenge(challenge, out);
  link.sendAll(out, sizeof out, deadline);
  if (challenge.status != AckStatus::kOk) return refuse(challenge.status);
  uint8_t bytes[kProofMessageBytes];
  link.recvAll(bytes, sizeof bytes, deadline);
  ProofMessage answer;
  if (std::string error = decodeProof(bytes, &answer); !error.empty()) {
    GS_LOG(kError, "refused connection from {}: {}", name, error);
    return -1;
  }
  // The connector's verdict on this side's proof; it has hung up when it refused.
  if (answer.status != AckStatus::kOk) return refuse(answer.status);
  const AckStatus status =
      auth::verify(config.jobToken, auth::kMeshConnector, exchange, answer.proof)
          ? AckStatus::kOk
          : AckStatus::kWrongToken;
  uint8_t ack[kAckBytes];
  encodeAck(status, ack);
  link.sendAll(ack, sizeof ack, deadline);
  return status == AckStatus::kOk ? hello.rank : refuse(status);
}

// The accepted socket as a Link: over TLS after its handshake, or null when the connector turned
// out to speak plaintext to this TLS rank (refused).
std::unique_ptr<Link> openAccepted(Fd fd, const TlsContext* tls, const MeshConfig& config,
                                   const Deadline& deadline, Refusals& refusals) {
  if (tls == nullptr) return std::make_unique<PlainLink>(std::move(fd));
  const std::string name = peerName(fd.get());
  if (peersInPlaintext(fd.get(), deadline)) {
    refusePlaintextPeer(std::move(fd), name, deadline, refusals);
    return nullptr;
  }
  return acceptTls(std::move(fd), *tls, deadline, {.rank = config.rank, .operation = "tcp accept"});
}

[[noreturn]] void missingRanks(const MeshConfig& config, const Links& peers,
                               const Refusals& refusals) {
  std::vector<int> missing;
  for (int r = config.rank + 1; r < config.size; ++r) {
    if (!peers[r] && config.wants(r)) missing.push_back(r);
  }
  std::string hint = "check that every rank was started with the same master address and job";
  if (!refusals.tlsMismatch.empty()) hint = refusals.tlsMismatch;
  throw TimeoutError(fmt::format("ranks {} did not connect within {} ms", fmt::join(missing, ", "),
                                 config.timeout.count()),
                     {.rank = config.rank, .operation = "tcp mesh", .hint = hint});
}

void acceptHigherRanks(int listener, const MeshConfig& config, const TlsContext* tls,
                       const Deadline& deadline, Links& peers) {
  int expected = 0;
  for (int r = config.rank + 1; r < config.size; ++r) expected += config.wants(r) ? 1 : 0;
  Refusals refusals;
  while (expected > 0) {
    std::optional<Fd> fd = acceptBefore(listener, deadline);
    if (!fd) missingRanks(config, peers, refusals);
    try {
      Deadline hello(config.helloTimeout);
      std::unique_ptr<Link> link = openAccepted(std::move(*fd), tls, config, hello, refusals);
      int peer = link ? admit(*link, config, peers, hello, refusals) : -1;
      if (peer >= 0) {
        peers[peer] = std::move(link);
        --expected;
      }
    } catch (const Error& e) {  // garbage, truncated or silent connections
      GS_LOG(kError, "dropped connection during handshake: {}", e.what());
    }
  }
}

}  // namespace

Links connectMesh(Store& store, const MeshConfig& config) {
  Deadline deadline(config.timeout);
  Links peers(config.size);
  if (config.size == 1) return peers;
  // One key and certificate for all of this rank's connections; each session holds a reference.
  std::unique_ptr<TlsContext> tls = config.tls ? std::make_unique<TlsContext>() : nullptr;
  Fd listener = listenTcp(config.host, 0);
  store.setString(addressKey(config, config.rank),
                  SocketAddress{config.host, boundPort(listener.get())}.toString());
  for (int peer = 0; peer < config.rank; ++peer) {
    if (config.wants(peer)) peers[peer] = connectToPeer(store, config, tls.get(), peer, deadline);
  }
  acceptHigherRanks(listener.get(), config, tls.get(), deadline, peers);
  return peers;
}

}  // namespace gradsync::tcp
