#include "common/allocator.h"

#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <cstdint>

namespace gradsync {

void keepFreedMemoryInHeap() {
  // 32 MiB is the largest mmap threshold mallopt accepts on 64-bit glibc; setting it also turns
  // off the adaptive threshold. Trimming the heap top only past 512 MiB keeps steps' memory.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace gradsync

namespace gradsync {

void shareOneHeapAcrossThreads() {
  mallopt(M_ARENA_MAX, 1);
}

void adviseHugePages(void* data, size_t size) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + size) & ~(kHugePage - 1);
  if (last <= first) return;
  // The advice is best effort: EINVAL where THP is compiled out leaves 4 KiB pages.
  (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace gradsync
