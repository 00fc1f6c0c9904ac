// The allocator policy is public (gradsync/allocator.h): the Python package applies it too.
#pragma once

#include <cstddef>

#include "gradsync/allocator.h"

namespace gradsync {

// One glibc heap (arena) for every thread of the process. glibc gives each thread that
// allocates concurrently an arena of its own, and with keepFreedMemoryInHeap each arena keeps
// its own peak: Wavelet's waves (`train --waves`, one thread each) would then hold the sum of
// their activation peaks, where one pool holds their interleaved peak (measured on cnn, 4
// workers, batch 64: rank 0's peak RSS 577 MiB with two waves in arenas of their own, 485 MiB in
// one, 486 MiB for one wave at batch 128). Call early, before the threads it should cover start;
// it changes the whole process.
void shareOneHeapAcrossThreads();

// Asks the kernel to back the whole 2 MiB extents inside [data, data + size) with transparent
// huge pages (THP's "madvise" mode, Debian's default). For large buffers written once, such as
// the elastic state a round's members receive: the first touch of a fresh 51.6 MB buffer took
// 0.15 s here in 4 KiB page faults and 5 ms in 2 MiB ones. Not always cheaper: on another VM of
// this kind (2026-12-03) 103 MB took 0.05 s in 4 KiB faults and 0.016 s in 2 MiB ones, but the
// first 2 MiB pages after an idle spell 0.25-0.33 s; where it matters, touch memory before it is
// waited for (a joiner's optimizer state: torch/elastic/plain_state.h). Call before the first
// touch; a no-op where the kernel refuses (THP off) or the range holds no whole extent.
// Thread-safe.
void adviseHugePages(void* data, size_t size);

}  // namespace gradsync
