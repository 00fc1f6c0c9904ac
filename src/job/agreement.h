// Startup checks that every rank of a job was launched with the same configuration, so that a
// misconfigured launch fails at once with a message naming the rank and the setting, instead of
// hanging in a collective or silently training something else.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/tags.h"
#include "gradsync/bootstrap.h"
#include "gradsync/store.h"
#include "gradsync/transport.h"

namespace gradsync {

// (setting as the user spells it, e.g. "--model", value), in the same order on every rank.
using Settings = std::vector<std::pair<std::string, std::string>>;

// Checks through the rendezvous store, before any transport exists, that every rank has the
// world size of rank 0. Each rank publishes its size; rank 0 reads every other rank's, the others
// read rank 0's first, so that both sides of a difference name it. Throws ConfigError naming the
// differing rank, or TimeoutError naming a rank that never arrives. Collective over the ranks of
// `config`.
void checkSameWorldSize(Store& store, const BootstrapConfig& config);

// Gathers every rank's `settings` on rank 0, which compares them with its own and sends its
// verdict back, so that every rank throws the same ConfigError when they differ:
// "rank 2 has --model vgg11 but rank 0 has cnn". Collective: every rank of `transport` calls it
// once, before any other traffic on tags::kAgreement.
void checkSameSettings(Transport& transport, const Settings& settings);

// Encodes settings for the wire (exposed for tests).
std::string encodeSettings(const Settings& settings);
Settings decodeSettings(const std::string& bytes);

// The first difference between rank `rank`'s settings and rank 0's, as a message; "" if none.
std::string describeDifference(const Settings& rank0, const Settings& other, int rank);
// The same, naming the two sides: "`otherName` has --lr 0.1 but `referenceName` has 0.05".
std::string describeDifference(const Settings& reference, const Settings& other,
                               const std::string& otherName, const std::string& referenceName);

}  // namespace gradsync
