// The file store: one file per key in a shared directory.
//
// Writers create a uniquely named temporary file and rename(2) it over the key's file, so a reader
// sees either no file or a complete value, never a partial one. Readers poll with a growing pause
// (no inotify: it does not work across hosts on NFS, the main reason to use this store). add()
// takes an flock(2) on a lock file so that read-modify-write is atomic across threads (each
// open() is its own lock owner) and processes. No fsync: a rendezvous outlives no crash.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/socket.h"
#include "gradsync/error.h"
#include "gradsync/store.h"
#include "rendezvous/store_util.h"

namespace gradsync::rendezvous {
namespace {

// Keep names well under NAME_MAX (255) with room for the hash suffix.
constexpr size_t kMaxNameBytes = 200;
// add() is not given a timeout by the Store API; a lock held longer than this means a process is
// stuck inside a few-microsecond critical section.
constexpr auto kLockTimeout = std::chrono::seconds(60);
constexpr auto kMaxPollPause = std::chrono::milliseconds(20);

[[noreturn]] void throwErrno(const std::string& what, const std::string& path) {
  throw SystemError(fmt::format("{} '{}' failed: {}", what, path, errnoText(errno)),
                    {.operation = "file store"});
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// "k_" + the key with every byte outside [A-Za-z0-9._-] written as %XX: injective, never "." or
// "..", never a hidden file (temporaries and the lock start with '.'). Over-long names are cut and
// get a hash suffix; '~' never appears in escaped names, so the two forms cannot collide.
std::string fileNameFor(const std::string& key) {
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      name += fmt::format("%{:02X}", c);
    }
  }
  if (name.size() > kMaxNameBytes) name = name.substr(0, 160) + fmt::format("~{:016x}", fnv1a(key));
  return name;
}

// Calls `ready` with growing pauses until it returns true or `timeout` passes.
bool pollWithBackoff(std::chrono::milliseconds timeout, const std::function<bool()>& ready) {
  Deadline deadline(clampTimeout(timeout));
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (ready()) return true;
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(pause, deadline.remaining()));
    pause = std::min<std::chrono::microseconds>(pause * 2, kMaxPollPause);
  }
}

std::optional<Bytes> readFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    throwErrno("open", path);
  }
  Bytes out;
  uint8_t buffer[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n == 0) return out;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throwErrno("read", path);
    out.insert(out.end(), buffer, buffer + n);
  }
}

void writeAll(int fd, const Bytes& value, const std::string& path) {
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throwErrno("write", path);
    done += static_cast<size_t>(n);
  }
}

// Holds an exclusive flock on `path` for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (!fd_.valid()) throwErrno("open", path);
    bool locked = pollWithBackoff(kLockTimeout, [&] {
      if (::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) return true;
      if (errno != EWOULDBLOCK && errno != EINTR) throwErrno("flock", path);
      return false;
    });
    if (!locked) {
      throw TimeoutError(
          fmt::format("could not lock '{}' within {} s", path, kLockTimeout.count()),
          {.operation = "store.add",
           .hint = "a process holding the lock is stuck (stopped or on a hung NFS)"});
    }
  }

 private:
  Fd fd_;  // closing it releases the lock
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) {
      throw SystemError(
          fmt::format("cannot create store directory '{}': {}", directory_, ec.message()),
          {.operation = "file store", .hint = "check the path and permissions"});
    }
    nonce_ = std::random_device{}();
  }

  void set(const std::string& key, const Bytes& value) override {
    writeAtomically(pathFor(key), value);
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::optional<Bytes> value;
    std::string path = pathFor(key);
    if (!pollWithBackoff(timeout, [&] { return (value = readFile(path)).has_value(); })) {
      throwStoreTimeout("store.get", {key}, 1, timeout, where());
    }
    return std::move(*value);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    FileLock lock(directory_ + "/.lock");
    std::string path = pathFor(key);
    int64_t result = addToCounter(readFile(path).value_or(Bytes{}), delta, key);
    writeAtomically(path, formatCounter(result));
    return result;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> missing = keys;
    bool done = pollWithBackoff(timeout, [&] {
      std::erase_if(missing, [&](const std::string& key) {
        return ::access(pathFor(key).c_str(), F_OK) == 0;
      });
      return missing.empty();
    });
    if (!done) throwStoreTimeout("store.wait", missing, keys.size(), timeout, where());
  }

 private:
  std::string pathFor(const std::string& key) const { return directory_ + "/" + fileNameFor(key); }
  std::string where() const { return fmt::format("the file store at '{}'", directory_); }

  void writeAtomically(const std::string& path, const Bytes& value) {
    // Unique across processes (pid), store objects (nonce) and threads (counter).
    std::string temp =
        fmt::format("{}/.tmp-{}-{:08x}-{}", directory_, ::getpid(), nonce_, counter_.fetch_add(1));
    {
      Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!fd.valid()) throwErrno("create", temp);
      try {
        writeAll(fd.get(), value, temp);
      } catch (...) {
        ::unlink(temp.c_str());
        throw;
      }
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      int err = errno;
      ::unlink(temp.c_str());
      errno = err;
      throwErrno("rename to", path);
    }
  }

  std::string directory_;
  uint32_t nonce_ = 0;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace
}  // namespace gradsync::rendezvous

namespace gradsync {

std::shared_ptr<Store> makeFileStore(const std::string& directory) {
  return std::make_shared<rendezvous::FileStore>(directory);
}

}  // namespace gradsync
