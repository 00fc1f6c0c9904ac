#include "transport/tcp/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "transport/tcp/frame.h"

namespace gradsync::tcp {
namespace {

std::string addressKey(const MeshConfig& config, int rank) {
  return fmt::format("{}/addr/{}", config.keyPrefix, rank);
}

// What a connection from rank `connector` to rank `acceptor` binds its proofs to, besides the
// job and both nonces: the ranks and the world size.
std::string bindingOf(int connector, int acceptor, int size) {
  return fmt::format("{}>{}/{}", connector, acceptor, size);
}

[[noreturn]] void refusedBy(int peer, AckStatus status, ErrorContext context) {
  context.hint =
      "every process of a job needs the same GRADSYNC_JOB_ID, GRADSYNC_JOB_TOKEN and world size";
  throw ProtocolError(fmt::format("rank {} refused the handshake: {}", peer, ackStatusText(status)),
                      context);
}

// Hello, then the acceptor's challenge, checked before this side's proof goes out: a peer
// without the token never sees it (common/auth.h).
Fd connectToPeer(Store& store, const MeshConfig& config, int peer, const Deadline& deadline) {
  ErrorContext context{.rank = config.rank, .peer = peer, .operation = "tcp connect"};
  std::string text = store.getString(addressKey(config, peer), config.timeout);
  Fd fd = connectTcp(SocketAddress::parse(text, addressKey(config, peer)), deadline);
  const auth::Nonce mine = auth::freshNonce();
  std::vector<uint8_t> hello = encodeHello({config.rank, config.size, config.jobId, mine});
  writeFully(fd.get(), hello.data(), hello.size(), deadline);
  uint8_t bytes[kChallengeBytes];
  readFully(fd.get(), bytes, kChallengeBytes, deadline);
  Challenge challenge;
  if (std::string error = decodeChallenge(bytes, &challenge); !error.empty()) {
    throw ProtocolError(error, context);
  }
  if (challenge.status != AckStatus::kOk) refusedBy(peer, challenge.status, context);
  const std::string binding = bindingOf(config.rank, peer, config.size);
  const auth::Exchange exchange{
      .jobId = config.jobId, .binding = binding, .initiator = mine, .responder = challenge.nonce};
  ProofMessage answer;
  if (!auth::verify(config.jobToken, auth::kMeshAcceptor, exchange, challenge.proof)) {
    answer.status = AckStatus::kWrongToken;
  } else {
    answer.proof = auth::prove(config.jobToken, auth::kMeshConnector, exchange);
  }
  uint8_t out[kProofMessageBytes];
  encodeProof(answer, out);
  writeFully(fd.get(), out, sizeof out, deadline);
  if (answer.status != AckStatus::kOk) refusedBy(peer, answer.status, context);
  uint8_t ack[kAckBytes];
  readFully(fd.get(), ack, sizeof ack, deadline);
  AckStatus status{};
  if (std::string error = decodeAck(ack, &status); !error.empty()) {
    throw ProtocolError(error, context);
  }
  if (status != AckStatus::kOk) refusedBy(peer, status, context);
  return fd;
}

AckStatus checkHello(const Hello& hello, const std::string& jobId, const MeshConfig& config,
                     const std::vector<Fd>& peers) {
  if (jobId != config.jobId) return AckStatus::kWrongJob;
  if (hello.size != config.size || hello.rank <= config.rank || hello.rank >= config.size) {
    return AckStatus::kBadRank;
  }
  if (peers[hello.rank].valid()) return AckStatus::kDuplicateRank;
  return AckStatus::kOk;
}

// Reads and checks one connector's handshake. Returns the peer's rank, or -1 after logging why
// it was refused.
int admit(int fd, const MeshConfig& config, const std::vector<Fd>& peers) {
  Deadline deadline(config.helloTimeout);
  const std::string name = peerName(fd);  // before the peer can hang up
  uint8_t fixed[kHelloFixedBytes];
  readFully(fd, fixed, sizeof fixed, deadline);
  Hello hello;
  size_t idLength = 0;
  if (std::string error = decodeHelloFixed(fixed, &hello, &idLength); !error.empty()) {
    GS_LOG(kError, "refused connection from {}: {}", name, error);
    return -1;
  }
  std::string jobId(idLength, '\0');
  readFully(fd, jobId.data(), jobId.size(), deadline);
  auto refuse = [&](AckStatus status) {
    GS_LOG(kError, "refused connection from {} claiming rank {}: {}", name, hello.rank,
           ackStatusText(status));
    return -1;
  };
  Challenge challenge{.status = checkHello(hello, jobId, config, peers),
                      .nonce = auth::freshNonce()};
  const std::string binding = bindingOf(hello.rank, config.rank, config.size);
  const auth::Exchange exchange{.jobId = config.jobId,
                                .binding = binding,
                                .initiator = hello.nonce,
                                .responder = challenge.nonce};
  if (challenge.status == AckStatus::kOk) {
    challenge.proof = auth::prove(config.jobToken, auth::kMeshAcceptor, exchange);
  }
  uint8_t out[kChallengeBytes];
  encodeChallenge(challenge, out);
  writeFully(fd, out, sizeof out, deadline);
  if (challenge.status != AckStatus::kOk) return refuse(challenge.status);
  uint8_t bytes[kProofMessageBytes];
  readFully(fd, bytes, sizeof bytes, deadline);
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
  writeFully(fd, ack, sizeof ack, deadline);
  return status == AckStatus::kOk ? hello.rank : refuse(status);
}

void acceptHigherRanks(int listener, const MeshConfig& config, const Deadline& deadline,
                       std::vector<Fd>& peers) {
  int expected = config.size - 1 - config.rank;
  while (expected > 0) {
    std::optional<Fd> fd = acceptBefore(listener, deadline);
    if (!fd) {
      std::vector<int> missing;
      for (int r = config.rank + 1; r < config.size; ++r) {
        if (!peers[r].valid()) missing.push_back(r);
      }
      throw TimeoutError(
          fmt::format("ranks {} did not connect within {} ms", fmt::join(missing, ", "),
                      config.timeout.count()),
          {.rank = config.rank,
           .operation = "tcp mesh",
           .hint = "check that every rank was started with the same master address and job"});
    }
    try {
      int peer = admit(fd->get(), config, peers);
      if (peer >= 0) {
        peers[peer] = std::move(*fd);
        --expected;
      }
    } catch (const Error& e) {  // garbage, truncated or silent connections
      GS_LOG(kError, "dropped connection during handshake: {}", e.what());
    }
  }
}

}  // namespace

std::vector<Fd> connectMesh(Store& store, const MeshConfig& config) {
  Deadline deadline(config.timeout);
  std::vector<Fd> peers(config.size);
  if (config.size == 1) return peers;
  Fd listener = listenTcp(config.host, 0);
  store.setString(addressKey(config, config.rank),
                  SocketAddress{config.host, boundPort(listener.get())}.toString());
  for (int peer = 0; peer < config.rank; ++peer) {
    peers[peer] = connectToPeer(store, config, peer, deadline);
  }
  acceptHigherRanks(listener.get(), config, deadline, peers);
  return peers;
}

}  // namespace gradsync::tcp
