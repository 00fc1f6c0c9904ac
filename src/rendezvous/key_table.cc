#include "rendezvous/key_table.h"

#include <algorithm>

#include "common/check.h"
#include "gradsync/error.h"
#include "rendezvous/store_util.h"

namespace gradsync::rendezvous {

void KeyTable::handle(ConnId conn, wire::Message request, Time now, std::vector<Reply>& replies) {
  GS_CHECK(!isParked(conn));
  if (auto* set = std::get_if<wire::SetRequest>(&request)) {
    replies.emplace_back(conn, wire::OkReply{});
    store(set->key, std::move(set->value), replies);
  } else if (auto* get = std::get_if<wire::GetRequest>(&request)) {
    auto it = values_.find(get->key);
    if (it != values_.end()) {
      replies.emplace_back(conn, wire::ValueReply{it->second});
    } else {
      park(conn, Parked{true, {get->key}, 1, now + std::chrono::milliseconds(get->timeoutMs)});
    }
  } else if (auto* add = std::get_if<wire::AddRequest>(&request)) {
    try {
      auto it = values_.find(add->key);
      int64_t result =
          addToCounter(it == values_.end() ? Bytes{} : it->second, add->delta, add->key);
      replies.emplace_back(conn, wire::IntegerReply{result});
      store(add->key, formatCounter(result), replies);
    } catch (const Error& e) {
      replies.emplace_back(conn, wire::ErrorReply{e.detail()});
    }
  } else if (auto* wait = std::get_if<wire::WaitRequest>(&request)) {
    std::vector<std::string> missing;
    for (const auto& key : wait->keys) {
      bool duplicate = std::find(missing.begin(), missing.end(), key) != missing.end();
      if (!values_.contains(key) && !duplicate) missing.push_back(key);
    }
    if (missing.empty()) {
      replies.emplace_back(conn, wire::OkReply{});
    } else {
      size_t count = missing.size();
      auto deadline = now + std::chrono::milliseconds(wait->timeoutMs);
      park(conn, Parked{false, std::move(missing), count, deadline});
    }
  } else {
    GS_CHECK(false && "KeyTable::handle got a message that is not a request");
  }
}

void KeyTable::expire(Time now, std::vector<Reply>& replies) {
  std::vector<ConnId> expired;
  for (const auto& [conn, parked] : parked_) {
    if (parked.deadline <= now) expired.push_back(conn);
  }
  for (ConnId conn : expired) {
    wire::TimedOutReply reply;
    for (const auto& key : parked_.at(conn).keys) {
      if (!values_.contains(key)) reply.missing.push_back(key);
    }
    replies.emplace_back(conn, std::move(reply));
    dropConnection(conn);
  }
}

std::optional<KeyTable::Time> KeyTable::nextDeadline() const {
  std::optional<Time> next;
  for (const auto& [conn, parked] : parked_) {
    if (!next || parked.deadline < *next) next = parked.deadline;
  }
  return next;
}

void KeyTable::park(ConnId conn, Parked parked) {
  for (const auto& key : parked.keys) waitersByKey_[key].push_back(conn);
  parked_.emplace(conn, std::move(parked));
}

void KeyTable::store(const std::string& key, Bytes value, std::vector<Reply>& replies) {
  values_[key] = std::move(value);
  auto waiting = waitersByKey_.find(key);
  if (waiting == waitersByKey_.end()) return;
  std::vector<ConnId> conns = std::move(waiting->second);
  waitersByKey_.erase(waiting);
  for (ConnId conn : conns) {
    auto it = parked_.find(conn);
    if (it == parked_.end() || --it->second.missing > 0) continue;
    if (it->second.isGet) {
      replies.emplace_back(conn, wire::ValueReply{values_.at(it->second.keys.front())});
    } else {
      replies.emplace_back(conn, wire::OkReply{});
    }
    parked_.erase(it);
  }
}

void KeyTable::dropConnection(ConnId conn) {
  auto it = parked_.find(conn);
  if (it == parked_.end()) return;
  for (const auto& key : it->second.keys) {
    auto waiting = waitersByKey_.find(key);
    if (waiting == waitersByKey_.end()) continue;
    std::erase(waiting->second, conn);
    if (waiting->second.empty()) waitersByKey_.erase(waiting);
  }
  parked_.erase(it);
}

}  // namespace gradsync::rendezvous
