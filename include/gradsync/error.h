// Error model of gradsync (see docs/errors.md).
//
// Recoverable failures (peer lost, timeout, bad frame, corrupt file, bad configuration) throw a
// type derived from gradsync::Error. Every message names where it happened: the rank, the peer,
// the operation and, where one exists, a hint at the likely cause. Broken invariants inside the
// library use GS_CHECK (common/check.h) and throw InternalError.
#pragma once

#include <stdexcept>
#include <string>

namespace gradsync {

// Where an error happened. Fields left at their defaults are omitted from the message.
struct ErrorContext {
  int rank = -1;          // the rank that observed the error
  int peer = -1;          // the remote rank involved, if any
  std::string operation;  // e.g. "allreduce", "recv", "store.get"
  std::string hint;       // what the user can do about it
  // Where a failure that a peer relayed began (the rank that was lost, or that failed first),
  // when the relaying peer said; failureOrigin() falls back to the peer or the rank.
  int origin = -1;
};

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, ErrorContext context = {});
  const ErrorContext& context() const { return context_; }
  // The message without the context decoration.
  const std::string& detail() const { return detail_; }

 private:
  ErrorContext context_;
  std::string detail_;
};

// The rank where `error` began: its context's origin, else the peer of a PeerLostError, else the
// rank that observed it; -1 when it names none. E.g. rank 0 sees "rank 1 failed: lost
// connection to rank 2" with peer 1 and origin 2.
int failureOrigin(const Error& error);

// A peer process died or closed its connection.
class PeerLostError : public Error {
  using Error::Error;
};
// A wait exceeded its timeout (the message names who did not arrive).
class TimeoutError : public Error {
  using Error::Error;
};
// The job's state is gone: every worker that held it was lost, and a worker without it never
// starts the job over (elastic rounds: docs/cluster.md). Restarting workers cannot bring it
// back; resuming from a checkpoint can (`gradsync train` exits 76 on it, and `gradsync launch`
// restarts no worker that did). Found by waiting in vain, so a kind of TimeoutError.
class StateLostError : public TimeoutError {
  using TimeoutError::TimeoutError;
};
// Malformed, truncated or oversized data on the wire, or a refused handshake.
class ProtocolError : public Error {
  using Error::Error;
};
// Invalid options, flags or environment: detected before any work starts.
class ConfigError : public Error {
  using Error::Error;
};
// A file is missing, truncated or corrupt (dataset, checkpoint): the message names the file.
class DataError : public Error {
  using Error::Error;
};
// A system call failed (errno text included).
class SystemError : public Error {
  using Error::Error;
};
// A library invariant was broken (a bug in gradsync): raised by GS_CHECK.
class InternalError : public Error {
  using Error::Error;
};

}  // namespace gradsync
