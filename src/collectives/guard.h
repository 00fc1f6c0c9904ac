// Runs the body of a collective: re-raises transport errors with the collective's name in their
// context (keeping the type), and aborts the transport before unwinding. The collective's buffers
// are about to be released while some of its sends and receives may still be pending: a timeout
// leaves its own operation pending, and a peer that failed or said goodbye fails only the
// operations that involve it, while a send to a live peer is still being written from the
// caller's buffer. abort() returns once the transport no longer touches any buffer.
//
// So every buffer that the body's sends and receives use must be declared before the call, never
// inside `body`: the body's locals are destroyed as the exception leaves it, before the handler
// here aborts, while the transport may still be writing into them (a receive buffer freed under
// a pending receive corrupted the heap of a rank woken from SIGSTOP after its peers timed out).
#pragma once

#include <fmt/format.h>

#include "gradsync/error.h"
#include "gradsync/transport.h"

namespace gradsync::detail {

template <typename Body>
void runCollective(const char* operation, Transport& transport, Body&& body) {
  auto rename = [&](const Error& e) {
    ErrorContext context = e.context();
    context.rank = transport.rank();
    context.operation = context.operation.empty()
                            ? operation
                            : fmt::format("{} ({})", operation, context.operation);
    return context;
  };
  try {
    body();
  } catch (const PeerLostError& e) {
    transport.abort(std::current_exception());
    throw PeerLostError(e.detail(), rename(e));
  } catch (const TimeoutError& e) {
    transport.abort(std::current_exception());
    throw TimeoutError(e.detail(), rename(e));
  } catch (const ProtocolError& e) {
    transport.abort(std::current_exception());
    throw ProtocolError(e.detail(), rename(e));
  }
}

}  // namespace gradsync::detail
