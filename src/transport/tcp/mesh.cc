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

// Constant-time comparison, so a token cannot be guessed byte by byte from timing.
bool sameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Fd connectToPeer(Store& store, const MeshConfig& config, int peer, const Deadline& deadline) {
  ErrorContext context{.rank = config.rank, .peer = peer, .operation = "tcp connect"};
  std::string text = store.getString(addressKey(config, peer), config.timeout);
  Fd fd = connectTcp(SocketAddress::parse(text, addressKey(config, peer)), deadline);
  std::vector<uint8_t> hello =
      encodeHello({config.rank, config.size, config.jobId, config.jobToken});
  writeFully(fd.get(), hello.data(), hello.size(), deadline);
  uint8_t ack[kAckBytes];
  readFully(fd.get(), ack, sizeof ack, deadline);
  AckStatus status{};
  if (std::string error = decodeAck(ack, &status); !error.empty()) {
    throw ProtocolError(error, context);
  }
  if (status != AckStatus::kOk) {
    context.hint =
        "every process of a job needs the same GRADSYNC_JOB_ID, GRADSYNC_JOB_TOKEN "
        "and world size";
    throw ProtocolError(
        fmt::format("rank {} refused the handshake: {}", peer, ackStatusText(status)), context);
  }
  return fd;
}

// Reads and checks one Hello. Returns the peer's rank, or -1 after logging why it was refused.
int admit(int fd, const MeshConfig& config, const std::vector<Fd>& peers) {
  Deadline deadline(config.helloTimeout);
  const std::string name = peerName(fd);  // before the peer can hang up
  uint8_t fixed[kHelloFixedBytes];
  readFully(fd, fixed, sizeof fixed, deadline);
  Hello hello;
  size_t idLength = 0;
  size_t tokenLength = 0;
  if (std::string error = decodeHelloFixed(fixed, &hello, &idLength, &tokenLength);
      !error.empty()) {
    GS_LOG(kError, "refused connection from {}: {}", name, error);
    return -1;
  }
  std::string fields(idLength + tokenLength, '\0');
  readFully(fd, fields.data(), fields.size(), deadline);
  hello.jobId = fields.substr(0, idLength);
  hello.jobToken = fields.substr(idLength);
  AckStatus status = AckStatus::kOk;
  if (hello.jobId != config.jobId) {
    status = AckStatus::kWrongJob;
  } else if (!sameSecret(hello.jobToken, config.jobToken)) {
    status = AckStatus::kWrongToken;
  } else if (hello.size != config.size || hello.rank <= config.rank || hello.rank >= config.size) {
    status = AckStatus::kBadRank;
  } else if (peers[hello.rank].valid()) {
    status = AckStatus::kDuplicateRank;
  }
  uint8_t ack[kAckBytes];
  encodeAck(status, ack);
  writeFully(fd, ack, sizeof ack, deadline);
  if (status != AckStatus::kOk) {
    GS_LOG(kError, "refused connection from {} claiming rank {}: {}", name, hello.rank,
           ackStatusText(status));
    return -1;
  }
  return hello.rank;
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
