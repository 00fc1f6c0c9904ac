// Process-wide allocator policy for training processes.
#pragma once

namespace gradsync {

// Keeps freed memory in glibc's heap instead of returning it to the kernel. By default, buffers
// above glibc's (adaptive) mmap threshold are unmapped when freed and page-faulted back on the
// next step: with LibTorch's multi-MB activations that halved cnn training throughput here
// (1,050 vs 2,547 samples/s over the first 200 steps). Call once, early, in the main program:
// it changes the whole process. gradsync's own library never calls it; `gradsync train` does,
// and so does the Python package's gs.init() (unless told not to).
void keepFreedMemoryInHeap();

}  // namespace gradsync
