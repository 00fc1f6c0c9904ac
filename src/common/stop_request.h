// A graceful stop on SIGTERM or SIGINT, the way Slurm and Kubernetes preempt a job and a user
// presses Ctrl-C: the first signal only raises a flag, which `gradsync train` polls at every step
// boundary (the ranks agree on it, finish the step and write a final checkpoint: docs/cluster.md,
// "Preemption"); a second signal exits at once with 128 + the signal. Process-wide, as signals
// are; every function is thread-safe, and the handler is async-signal-safe (a lock-free atomic,
// write(2) and _exit(2) only).
#pragma once

namespace gradsync {

// Installs the SIGTERM and SIGINT handlers (idempotent), and ignores SIGXFSZ so that a file-size
// limit fails the write that hits it (EFBIG, reported with the path) instead of killing the
// process.
void installStopHandlers();
// The signal that asked for a stop (or requestStop's), 0 if none.
int stopRequested();
// Asks for a stop as the first signal does (tests and embedding programs).
void requestStop(int signal);
// Forgets a request (tests).
void clearStopRequest();

}  // namespace gradsync
