// Which elements of a communication unit a rank owns under --sync sharded (the ones whose
// update it computes and then allgathers): a flat block (blockOf of the unit's elements), or,
// for a weight the fully-connected exchange handles (fc_exchange.h), a block of its columns:
// in row-major memory, one run of the owned columns per row. Pure, torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gradsync/transport.h"

namespace gradsync {

struct Ownership {
  size_t runs = 1;    // rows (1 for a flat block)
  size_t stride = 0;  // elements per row
  size_t first = 0;   // the first owned element of the first run, within the unit
  size_t length = 0;  // owned elements per run

  size_t elements() const { return runs * length; }
  size_t runBegin(size_t k) const { return first + k * stride; }
};

// blockOf(elements, size, rank) as one run.
Ownership flatOwnership(size_t elements, int size, int rank);
// Columns blockOf(columns, size, rank) of a row-major matrix of elements / columns rows.
Ownership columnOwnership(size_t elements, size_t columns, int size, int rank);

// The owned elements of `unit` (the unit's values), run after run, into `packed`; and back.
void packOwned(const Ownership& own, std::span<const float> unit, std::span<float> packed);
void unpackOwned(const Ownership& own, std::span<const float> packed, std::span<float> unit);

// Every rank's owned elements of `values` (one unit, `columns` per row, 0 for flat blocks),
// gathered into `values` on every rank: each rank packs its own into `staging` (as large as
// `values`, which must not overlap it), one allgatherv, then every block is unpacked. Blocking,
// collective over `transport` on `tag`.
void allgatherOwned(Transport& transport, std::span<float> values, size_t columns,
                    std::span<float> staging, uint64_t tag);

}  // namespace gradsync
