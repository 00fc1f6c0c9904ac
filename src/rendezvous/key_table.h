// The state of the TCP store server: values, and the requests parked until their keys exist or
// their timeout passes. No I/O and no clock of its own (callers pass `now`): the server's poll
// loop feeds it decoded requests and sends the replies it returns, which keeps the waiting logic
// testable without sockets. Not thread-safe: one loop thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/tcp_store_wire.h"

namespace gradsync::rendezvous {

class KeyTable {
 public:
  using ConnId = uint64_t;
  using Time = std::chrono::steady_clock::time_point;
  struct Reply {
    ConnId conn;
    wire::Message message;
  };

  // Handles a set/get/add/wait request from `conn` received at `now` and appends the replies now
  // due: to `conn` unless its request is parked, and to parked requests of other connections that
  // a set or add completed. A connection has at most one parked request (the server reads nothing
  // more from it until that is answered, which keeps replies in request order).
  void handle(ConnId conn, wire::Message request, Time now, std::vector<Reply>& replies);
  // Answers parked requests whose timeout has passed with TimedOutReply (the keys still missing).
  void expire(Time now, std::vector<Reply>& replies);
  // The earliest deadline of a parked request, to bound the poll loop's sleep.
  std::optional<Time> nextDeadline() const;
  bool isParked(ConnId conn) const { return parked_.contains(conn); }
  // Forgets the parked request of a closed connection.
  void dropConnection(ConnId conn);
  size_t parkedCount() const { return parked_.size(); }

 private:
  struct Parked {
    bool isGet = false;             // a get is answered with the value of keys[0]
    std::vector<std::string> keys;  // keys missing when parked
    size_t missing = 0;             // how many of them are still missing
    Time deadline;
  };

  void park(ConnId conn, Parked parked);
  // Stores the value and answers the requests that were waiting only for this key.
  void store(const std::string& key, Bytes value, std::vector<Reply>& replies);

  std::unordered_map<std::string, Bytes> values_;
  std::unordered_map<ConnId, Parked> parked_;
  std::unordered_map<std::string, std::vector<ConnId>> waitersByKey_;
};

}  // namespace gradsync::rendezvous
