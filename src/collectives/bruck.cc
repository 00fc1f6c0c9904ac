// Bruck's allgather (bruck.h). Rank r holds blocks r, r + 1, ..., r + h - 1 (mod P), h = 1 at
// the start. At each step it sends its first m = min(h, P - h) of them to rank r - h and
// receives blocks r + h, ..., r + h + m - 1 from rank r + h (which holds them first), so h grows
// to h + m: 1, 2, 4, ... up to P in ceil(log2 P) steps. The blocks of a step are consecutive
// modulo P, so they are one run of the buffer, or two where they wrap past block P - 1: each run
// goes as one message (the sender and the receiver cut the same runs, as both compute them from
// the same blocks; empty runs are not sent). Everything lands in place: no staging buffer, no
// final rotation.
#include "collectives/bruck.h"

#include <algorithm>

#include "collectives/guard.h"

namespace gradsync {
namespace {

// The byte runs of blocks first, first + 1, ..., first + count - 1 (mod P): one, or two where
// they wrap; empty runs left out.
std::vector<ring::Span> runsOf(const std::vector<ring::Span>& blocks, int first, int count) {
  const int p = static_cast<int>(blocks.size());
  std::vector<ring::Span> runs;
  auto add = [&](int from, int to) {  // blocks [from, to), to > from
    const size_t begin = blocks[from].offset;
    const size_t end = blocks[to - 1].offset + blocks[to - 1].bytes;
    if (end > begin) runs.push_back({begin, end - begin});
  };
  const int end = first + count;
  add(first, std::min(end, p));
  if (end > p) add(0, end - p);
  return runs;
}

}  // namespace

void bruckAllgatherv(Transport& transport, uint8_t* data, const std::vector<ring::Span>& blocks,
                     const CollectiveOptions& options) {
  const int p = transport.size(), rank = transport.rank();
  if (p == 1) return;
  detail::runCollective("allgather (Bruck)", transport, [&] {
    // Every step's receives are posted first, into their final places: each step hears from
    // another rank (r + h for h = 1, 2, 4, ... < P), so none waits behind another, and a run
    // that arrives before its step is not buffered and copied again.
    std::vector<std::vector<WorkPtr>> recvs;
    for (int held = 1; held < p; held += std::min(held, p - held)) {
      const int from = (rank + held) % p;
      recvs.emplace_back();
      for (const ring::Span& run : runsOf(blocks, from, std::min(held, p - held))) {
        recvs.back().push_back(transport.recv(from, options.tag, data + run.offset, run.bytes));
      }
    }
    std::vector<WorkPtr> sends;
    size_t step = 0;
    for (int held = 1; held < p; ++step) {
      const int m = std::min(held, p - held), to = (rank - held + p) % p;
      for (const ring::Span& run : runsOf(blocks, rank, m)) {
        sends.push_back(transport.send(to, options.tag, data + run.offset, run.bytes));
      }
      for (WorkPtr& recv : recvs[step]) recv->wait();  // what the next step sends
      held += m;
    }
    for (WorkPtr& send : sends) send->wait();
  });
}

}  // namespace gradsync
