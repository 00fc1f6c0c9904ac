// Feeds arbitrary bytes to the TCP transport's decoders (frame header, hello, challenge, proof,
// ack), as a hostile
// or broken peer could. They must never crash, read out of bounds, or accept an oversized length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "transport/tcp/frame.h"

using namespace gradsync::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kMax = 1 << 20;
  if (size >= kFrameHeaderBytes) {
    FrameHeader header;
    if (decodeFrameHeader(data, kMax, &header).empty() && header.length > kMax) std::abort();
  }
  if (size >= kHelloFixedBytes) {
    Hello hello;
    size_t idLength = 0;
    if (decodeHelloFixed(data, &hello, &idLength).empty() && idLength > kMaxHelloField) {
      std::abort();
    }
  }
  if (size >= kChallengeBytes) {
    Challenge challenge;
    decodeChallenge(data, &challenge);
  }
  if (size >= kProofMessageBytes) {
    ProofMessage proof;
    decodeProof(data, &proof);
  }
  if (size >= kAckBytes) {
    AckStatus status{};
    decodeAck(data, &status);
  }
  return 0;
}
