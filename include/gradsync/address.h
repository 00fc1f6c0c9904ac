// A network endpoint, as written in flags and environment variables ("host:port").
#pragma once

#include <string>

namespace gradsync {

struct SocketAddress {
  std::string host;
  int port = 0;

  std::string toString() const;  // "host:port", "[v6]:port"
  // Parses "host:port" ("[v6]:port" too); throws ConfigError naming `what` when malformed.
  static SocketAddress parse(const std::string& text, const std::string& what);
};

}  // namespace gradsync
