#include "sync/shard_ownership.h"

#include <algorithm>

#include "common/check.h"
#include "gradsync/collectives.h"

namespace gradsync {

Ownership flatOwnership(size_t elements, int size, int rank) {
  const Block own = blockOf(elements, size, rank);
  return {.runs = 1, .stride = elements, .first = own.begin, .length = own.size()};
}

Ownership columnOwnership(size_t elements, size_t columns, int size, int rank) {
  GS_CHECK(columns > 0 && elements % columns == 0);
  const Block own = blockOf(columns, size, rank);
  return {.runs = elements / columns, .stride = columns, .first = own.begin, .length = own.size()};
}

void packOwned(const Ownership& own, std::span<const float> unit, std::span<float> packed) {
  GS_CHECK(packed.size() >= own.elements());
  for (size_t k = 0; k < own.runs; ++k) {
    std::copy_n(unit.begin() + static_cast<std::ptrdiff_t>(own.runBegin(k)), own.length,
                packed.begin() + static_cast<std::ptrdiff_t>(k * own.length));
  }
}

void unpackOwned(const Ownership& own, std::span<const float> packed, std::span<float> unit) {
  GS_CHECK(packed.size() >= own.elements());
  for (size_t k = 0; k < own.runs; ++k) {
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(k * own.length), own.length,
                unit.begin() + static_cast<std::ptrdiff_t>(own.runBegin(k)));
  }
}

void allgatherOwned(Transport& transport, std::span<float> values, size_t columns,
                    std::span<float> staging, uint64_t tag) {
  GS_CHECK(staging.size() >= values.size());
  const int size = transport.size();
  std::vector<Ownership> owners;
  std::vector<size_t> bytes;
  std::vector<size_t> at;  // where each rank's packed block sits in `staging`
  size_t offset = 0;
  for (int r = 0; r < size; ++r) {
    owners.push_back(columns > 0 ? columnOwnership(values.size(), columns, size, r)
                                 : flatOwnership(values.size(), size, r));
    bytes.push_back(owners.back().elements() * sizeof(float));
    at.push_back(offset);
    offset += owners.back().elements();
  }
  const int rank = transport.rank();
  packOwned(owners[rank], values, staging.subspan(at[rank]));
  allgatherv(transport, {reinterpret_cast<uint8_t*>(staging.data()), values.size() * sizeof(float)},
             bytes, {.tag = tag});
  for (int r = 0; r < size; ++r) unpackOwned(owners[r], staging.subspan(at[r]), values);
}

}  // namespace gradsync
