// Runs the body of a collective: re-raises transport errors with the collective's name in their
// context (keeping the type), and on a timeout aborts the transport before unwinding, because the
// collective's buffers are about to be released while its sends and receives are still pending.
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
    throw PeerLostError(e.detail(), rename(e));
  } catch (const TimeoutError& e) {
    transport.abort(std::current_exception());
    throw TimeoutError(e.detail(), rename(e));
  } catch (const ProtocolError& e) {
    throw ProtocolError(e.detail(), rename(e));
  }
}

}  // namespace gradsync::detail
