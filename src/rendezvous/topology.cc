#include "gradsync/topology.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {

Topology Topology::flat(int size) {
  std::vector<int> hostOf(static_cast<size_t>(std::max(size, 0)));
  for (int r = 0; r < size; ++r) hostOf[r] = r;
  return Topology(std::move(hostOf));
}

Topology Topology::uniform(int size, int ranksPerHost) {
  if (size < 1 || ranksPerHost < 1) {
    throw ConfigError(fmt::format("cannot place {} ranks at {} per host", size, ranksPerHost),
                      {.hint = "--ranks-per-host needs a positive number"});
  }
  std::vector<int> hostOf(size);
  for (int r = 0; r < size; ++r) hostOf[r] = r / ranksPerHost;
  return Topology(std::move(hostOf));
}

Topology Topology::fromHostIds(const std::vector<std::string>& hostIds) {
  std::map<std::string, int> index;
  std::vector<int> hostOf;
  for (const std::string& id : hostIds) {
    auto [it, inserted] = index.emplace(id, static_cast<int>(index.size()));
    hostOf.push_back(it->second);
  }
  return Topology(std::move(hostOf));
}

Topology::Topology(std::vector<int> hostOf) : hostOf_(std::move(hostOf)) {
  localRank_.resize(hostOf_.size());
  for (size_t r = 0; r < hostOf_.size(); ++r) {
    const int host = hostOf_[r];
    if (host < 0 || host > static_cast<int>(members_.size())) {
      throw ConfigError(
          fmt::format("rank {} is on host {}, but hosts must be numbered in the "
                      "order of their lowest rank ({} so far)",
                      r, host, members_.size()));
    }
    if (host == static_cast<int>(members_.size())) members_.emplace_back();
    localRank_[r] = static_cast<int>(members_[host].size());
    members_[host].push_back(static_cast<int>(r));
  }
}

Topology Topology::withHostLinks(HostLinks links) const {
  Topology copy = *this;
  copy.hostLinks_ = links;
  return copy;
}

std::vector<int> Topology::crossGroup(int rank) const {
  std::vector<int> group;
  const int local = localRank_[rank];
  for (const std::vector<int>& ranks : members_) {
    if (local < static_cast<int>(ranks.size())) group.push_back(ranks[local]);
  }
  return group;
}

bool Topology::regular() const {
  return std::all_of(members_.begin(), members_.end(),
                     [&](const auto& ranks) { return ranks.size() == members_.front().size(); });
}

int Topology::ranksPerHost() const {
  return regular() && !members_.empty() ? static_cast<int>(members_.front().size()) : 0;
}

std::string Topology::describe() const {
  if (regular()) {
    return fmt::format("{} host{} x {} rank{}", hosts(), hosts() == 1 ? "" : "s", ranksPerHost(),
                       ranksPerHost() == 1 ? "" : "s");
  }
  std::vector<size_t> counts;
  for (const auto& ranks : members_) counts.push_back(ranks.size());
  return fmt::format("{} hosts ({} ranks)", hosts(), fmt::join(counts, ", "));
}

}  // namespace gradsync
