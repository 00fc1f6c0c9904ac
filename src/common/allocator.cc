#include "common/allocator.h"

#include <malloc.h>
#include <stdlib.h>

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

}  // namespace gradsync
