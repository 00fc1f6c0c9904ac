#include "job/agreement.h"

#include <cstring>
#include <map>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string worldSizeKey(int rank) {
  return fmt::format("job/world_size/{}", rank);
}

const char* kWorldSizeHint =
    "every process of a job needs the same --world-size / WORLD_SIZE (or mpirun -np)";

ConfigError differentWorldSize(int me, int rank, int size, int rank0Size) {
  return ConfigError(
      fmt::format("rank {} has world size {} but rank 0 has {}", rank, size, rank0Size),
      {.rank = me, .operation = "startup check", .hint = kWorldSizeHint});
}

void putU32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

// Waits for an operation on a local buffer of the caller's: a timeout leaves it pending, so the
// transport is aborted before the error unwinds the buffer (as collectives/guard.h does).
void waitHere(Transport& t, const WorkPtr& work) {
  try {
    work->wait();
  } catch (const TimeoutError&) {
    t.abort(std::current_exception());
    throw;
  }
}

// Sends a length-prefixed string.
void sendString(Transport& t, int peer, const std::string& text) {
  uint64_t length = text.size();
  waitHere(t, t.send(peer, tags::kAgreement, &length, sizeof length));
  waitHere(t, t.send(peer, tags::kAgreement, text.data(), text.size()));
}

std::string recvString(Transport& t, int peer) {
  uint64_t length = 0;
  waitHere(t, t.recv(peer, tags::kAgreement, &length, sizeof length));
  if (length > (uint64_t{1} << 24)) {
    throw ProtocolError(fmt::format("rank {} sent {} bytes of settings", peer, length),
                        {.rank = t.rank(), .peer = peer, .operation = "startup check"});
  }
  std::string text(length, '\0');
  waitHere(t, t.recv(peer, tags::kAgreement, text.data(), text.size()));
  return text;
}

}  // namespace

void checkSameWorldSize(Store& store, const BootstrapConfig& config) {
  const std::string mine = std::to_string(config.size);
  auto sizeOf = [&](int rank) {
    try {
      return std::stoi(store.getString(worldSizeKey(rank), config.timeout));
    } catch (const TimeoutError&) {
      throw TimeoutError(
          fmt::format("rank {} did not join the job within {} ms", rank, config.timeout.count()),
          {.rank = config.rank,
           .operation = "startup check",
           .hint = "was it started, with the same --job-token / GRADSYNC_JOB_TOKEN, job id and "
                   "master address and port?"});
    }
  };
  if (config.rank != 0) {
    // Read rank 0's size before publishing ours: rank 0 exits, and its store with it, as soon as
    // it sees a difference, so a rank that differs must already know rank 0's size by then (and
    // then a failed publish does not matter).
    int rank0Size = sizeOf(0);
    try {
      store.setString(worldSizeKey(config.rank), mine);
    } catch (const Error&) {
      if (rank0Size == config.size) throw;
    }
    if (rank0Size != config.size) {
      throw differentWorldSize(config.rank, config.rank, config.size, rank0Size);
    }
    return;
  }
  store.setString(worldSizeKey(0), mine);
  for (int rank = 1; rank < config.size; ++rank) {
    int size = sizeOf(rank);
    if (size != config.size) throw differentWorldSize(0, rank, size, config.size);
  }
}

std::string encodeSettings(const Settings& settings) {
  std::string out;
  putU32(out, static_cast<uint32_t>(settings.size()));
  for (const auto& [name, value] : settings) {
    putU32(out, static_cast<uint32_t>(name.size()));
    out += name;
    putU32(out, static_cast<uint32_t>(value.size()));
    out += value;
  }
  return out;
}

Settings decodeSettings(const std::string& bytes) {
  size_t at = 0;
  auto u32 = [&] {
    if (bytes.size() - at < 4) throw ProtocolError("truncated settings");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) value = value << 8 | static_cast<uint8_t>(bytes[at++]);
    return value;
  };
  auto text = [&] {
    uint32_t length = u32();
    if (bytes.size() - at < length) throw ProtocolError("truncated settings");
    std::string out = bytes.substr(at, length);
    at += length;
    return out;
  };
  Settings settings(u32());
  for (auto& [name, value] : settings) {
    name = text();
    value = text();
  }
  if (at != bytes.size()) throw ProtocolError("trailing bytes after the settings");
  return settings;
}

std::string describeDifference(const Settings& rank0, const Settings& other, int rank) {
  return describeDifference(rank0, other, fmt::format("rank {}", rank), "rank 0");
}

std::string describeDifference(const Settings& reference, const Settings& other,
                               const std::string& otherName, const std::string& referenceName) {
  std::map<std::string, std::string> theirs(other.begin(), other.end());
  auto shown = [](const std::string& value) { return value.empty() ? "\"\"" : value; };
  for (const auto& [name, value] : reference) {
    auto it = theirs.find(name);
    if (it == theirs.end()) {
      return fmt::format("{} has no setting {} but {} has {}", otherName, name, referenceName,
                         shown(value));
    }
    if (it->second != value) {
      return fmt::format("{} has {} {} but {} has {}", otherName, name, shown(it->second),
                         referenceName, shown(value));
    }
    theirs.erase(it);
  }
  if (!theirs.empty()) {
    return fmt::format("{} has the setting {} that {} does not know", otherName,
                       theirs.begin()->first, referenceName);
  }
  return "";
}

void checkSameSettings(Transport& transport, const Settings& settings) {
  std::string verdict;
  if (transport.rank() == 0) {
    for (int rank = 1; rank < transport.size(); ++rank) {
      std::string difference =
          describeDifference(settings, decodeSettings(recvString(transport, rank)), rank);
      if (verdict.empty()) verdict = difference;
    }
    for (int rank = 1; rank < transport.size(); ++rank) sendString(transport, rank, verdict);
  } else {
    sendString(transport, 0, encodeSettings(settings));
    verdict = recvString(transport, 0);
  }
  if (!verdict.empty()) {
    throw ConfigError(verdict, {.rank = transport.rank(),
                                .operation = "startup check",
                                .hint = "launch every rank with the same configuration"});
  }
}

}  // namespace gradsync
