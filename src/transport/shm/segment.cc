#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "common/auth.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/socket.h"
#include "gradsync/error.h"

namespace gradsync::shm {
namespace {

constexpr size_t kPage = 4096;
constexpr const char* kPrefix = "gradsync-";

size_t roundUp(size_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

size_t headerBytes() {
  return roundUp(sizeof(SegmentHeader));
}

size_t slotBytes(uint64_t ringBytes) {
  return roundUp(sizeof(RingControl)) + roundUp(ringBytes);
}

std::string freshName(int rank) {
  auth::Nonce nonce = auth::freshNonce();
  return fmt::format("/{}{}-{}-{:02x}", kPrefix, ::getpid(), rank,
                     fmt::join(nonce.begin(), nonce.begin() + 6, ""));
}

// The creating process's PID from a name "gradsync-PID-...", or 0.
pid_t pidOfName(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return 0;
  char* end = nullptr;
  long pid = std::strtol(name.c_str() + std::char_traits<char>::length(kPrefix), &end, 10);
  return (end != nullptr && *end == '-' && pid > 0) ? static_cast<pid_t>(pid) : 0;
}

// MAP_POPULATE maps every page now (the owner's mapping allocates them): a ring's pages are
// otherwise first touched by its first messages, a page fault each on both sides, which made a
// job's first thousand 4 KiB messages several times slower than the rest (a 4 KiB allreduce on 2
// ranks 83 us over its first 1,000 repeats against 10 us once the rings were warm).
void* mapShared(int fd, size_t bytes, const std::string& name) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    throw SystemError(fmt::format("mapping shared memory {} ({} bytes) failed: {}", name, bytes,
                                  errnoText(errno)),
                      {.operation = "shm connect"});
  }
  return base;
}

}  // namespace

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

Segment::~Segment() {
  release();
}

void Segment::release() {
  unlink();
  if (base_ != nullptr) ::munmap(base_, bytes_);
  base_ = nullptr;
}

void Segment::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

size_t Segment::bytesFor(uint32_t slots, uint64_t ringBytes) {
  return headerBytes() + slots * slotBytes(ringBytes);
}

Ring Segment::ring(uint32_t slot) {
  GS_CHECK(slot < header().slots);
  auto* start = static_cast<uint8_t*>(base_) + headerBytes() + slot * slotBytes(header().ringBytes);
  return Ring(reinterpret_cast<RingControl*>(start), start + roundUp(sizeof(RingControl)),
              header().ringBytes);
}

Segment Segment::create(int rank, uint32_t slots, uint64_t ringBytes, uint64_t jobHash) {
  GS_CHECK(slots >= 1 && slots <= kMaxSlots && ringBytes > 0);
  removeStaleSegments();
  const std::string name = freshName(rank);
  Fd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    throw SystemError(
        fmt::format("creating shared memory {} failed: {}", name, errnoText(errno)),
        {.rank = rank, .operation = "shm connect", .hint = "is /dev/shm mounted and writable?"});
  }
  const size_t bytes = bytesFor(slots, ringBytes);
  Segment segment(name, nullptr, bytes, /*owner=*/true);  // unlinks on any failure below
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    throw SystemError(fmt::format("sizing shared memory {} to {} bytes failed: {}", name, bytes,
                                  errnoText(errno)),
                      {.rank = rank, .operation = "shm connect", .hint = "is /dev/shm full?"});
  }
  segment.base_ = mapShared(fd.get(), bytes, name);
  auto* header = new (segment.base_) SegmentHeader();
  header->rank = rank;
  header->pid = ::getpid();
  header->slots = slots;
  header->ringBytes = ringBytes;
  header->jobHash = jobHash;
  for (uint32_t s = 0; s < slots; ++s) {
    auto* start = static_cast<uint8_t*>(segment.base_) + headerBytes() + s * slotBytes(ringBytes);
    new (start) RingControl();
  }
  return segment;
}

Segment Segment::open(const std::string& name, int rank, uint32_t slots, uint64_t jobHash) {
  ErrorContext context{.peer = rank, .operation = "shm connect"};
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    throw SystemError(
        fmt::format("opening rank {}'s shared memory {} failed: {}", rank, name, errnoText(errno)),
        context);
  }
  if (static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) {
    throw ProtocolError(fmt::format("{} is not a gradsync segment (too small)", name), context);
  }
  Segment segment(name, mapShared(fd.get(), static_cast<size_t>(st.st_size), name),
                  static_cast<size_t>(st.st_size), /*owner=*/false);
  const SegmentHeader& h = segment.header();
  if (h.magic != kSegmentMagic || h.version != kSegmentVersion || h.rank != rank ||
      h.slots != slots || h.jobHash != jobHash || h.ringBytes == 0 ||
      bytesFor(h.slots, h.ringBytes) != segment.bytes_) {
    throw ProtocolError(
        fmt::format("shared memory {} is not rank {}'s segment of this job (version {}, rank {}, "
                    "{} slots)",
                    name, rank, h.version, h.rank, h.slots),
        context);
  }
  return segment;
}

int removeStaleSegments(int minAgeSeconds) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const time_t now = ::time(nullptr);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const pid_t pid = pidOfName(name);
    struct stat st {};
    if (pid == 0 || ::fstatat(::dirfd(dir), entry->d_name, &st, 0) != 0) continue;
    if (st.st_uid != ::getuid() || now - st.st_mtime < minAgeSeconds) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its creator is still there
    if (::shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
      GS_LOG(kWarn, "removed /dev/shm/{}, left behind by process {} which no longer exists", name,
             pid);
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace gradsync::shm
