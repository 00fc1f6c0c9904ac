// Feeds arbitrary bytes to the rendezvous store's frame decoders, as a hostile client could.
#include <cstddef>
#include <cstdint>
#include <span>

#include "rendezvous/tcp_store_wire.h"

using namespace gradsync::rendezvous::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  HeaderResult header = decodeHeader(bytes);
  if (header.status == HeaderResult::Status::kComplete && size >= kHeaderBytes) {
    size_t available = size - kHeaderBytes;
    size_t payload =
        header.header.payloadBytes < available ? header.header.payloadBytes : available;
    decodePayload(header.header.type, bytes.subspan(kHeaderBytes, payload));
  }
  return 0;
}
