// A rank's shared-memory segment: a POSIX shared memory object (/dev/shm/gradsync-PID-RANK-
// NONCE) holding the rank's doorbell and one inbound ring per rank of its host (ring.h), which
// only that sender writes. Every rank of the host maps every other's segment; once all have,
// the owner unlinks the name, so that nothing is left in /dev/shm whatever happens later (a
// SIGKILL included): the memory lives as long as some process maps it. A crash between
// creation and unlinking (a second or so at startup) can leave a name behind: every creation
// first removes the names of this user whose creating process is gone.
//
// Layout: the header in the first page, then per slot (the local rank of the sender) a
// RingControl page and `ringBytes` of data. Segments are created 0600.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/doorbell.h"
#include "transport/shm/ring.h"

namespace gradsync::shm {

inline constexpr uint64_t kSegmentMagic = 0x4753534852454431ull;  // "GSSHRED1"
inline constexpr uint32_t kSegmentVersion = 1;
inline constexpr size_t kMaxSlots = 1024;

struct SegmentHeader {
  uint64_t magic = kSegmentMagic;
  uint32_t version = kSegmentVersion;
  int32_t rank = -1;   // the owner (receiver), a rank of the job
  int32_t pid = 0;     // the owner's process
  uint32_t slots = 0;  // rings: one per rank of the host, by local rank
  uint64_t ringBytes = 0;
  uint64_t jobHash = 0;  // of the job id and store prefix: segments of another job are refused
  // Where the owner's probe word lives in its address space, and its value: peers check with
  // process_vm_readv whether they may read the owner's memory directly (single-copy sends).
  uint64_t probeAddress = 0;
  uint64_t probeValue = 0;
  // canRead[s]: the owner may read slot s's sender's memory directly (set during connect).
  uint8_t canRead[kMaxSlots] = {};
  alignas(64) Doorbell doorbell;
};

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();  // unmaps; unlinks the name if this process created it and has not yet

  // Creates and maps a fresh segment. Throws SystemError (naming the object) on failure.
  static Segment create(int rank, uint32_t slots, uint64_t ringBytes, uint64_t jobHash);
  // Maps an existing segment by name and checks its header. Throws SystemError if it cannot be
  // opened, ProtocolError if it is not a gradsync segment of this job and shape.
  static Segment open(const std::string& name, int rank, uint32_t slots, uint64_t jobHash);

  // Removes the name (the mapping stays valid). Idempotent.
  void unlink();

  const std::string& name() const { return name_; }
  SegmentHeader& header() { return *static_cast<SegmentHeader*>(base_); }
  Ring ring(uint32_t slot);

  // Bytes of a segment with these dimensions.
  static size_t bytesFor(uint32_t slots, uint64_t ringBytes);

 private:
  Segment(std::string name, void* base, size_t bytes, bool owner)
      : name_(std::move(name)), base_(base), bytes_(bytes), linked_(owner) {}
  void release();

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;  // created here and not yet unlinked
};

// Unlinks /dev/shm/gradsync-* objects of this user whose creating process no longer exists and
// that are older than `minAgeSeconds`; returns how many. Called before every creation.
int removeStaleSegments(int minAgeSeconds = 10);

}  // namespace gradsync::shm
