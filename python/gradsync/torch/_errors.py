"""gradsync's errors as Python exceptions (docs/errors.md lists the C++ types they mirror).

Every one is a ``GradsyncError`` whose message names the rank that saw it, the operation, the
peer involved and a hint, as in C++; the same pieces are attributes (``rank``, ``peer``: int or
None; ``operation``, ``hint``, ``detail``: str). ``ConfigError`` is also a ``ValueError`` (a bad
spec, flag or combination, raised before any work starts), ``TimeoutError`` also Python's
``TimeoutError`` (``StateLostError``, an elastic job's state lost with every worker holding it, is
one), ``PeerLostError`` also a ``ConnectionError`` and ``SystemCallError`` also an
``OSError``.
"""

from __future__ import annotations

import builtins


class GradsyncError(RuntimeError):
    """Base of every error gradsync raises; see the module docstring for its attributes."""

    rank: int | None = None
    peer: int | None = None
    operation: str = ""
    hint: str = ""
    detail: str = ""


class ConfigError(GradsyncError, ValueError):
    """Invalid options, spec strings or environment, detected before any work starts."""


class PeerLostError(GradsyncError, ConnectionError):
    """A peer process died, was interrupted or closed its connections: the message names it."""


class TimeoutError(GradsyncError, builtins.TimeoutError):  # noqa: A001 (mirrors C++'s name)
    """A wait exceeded the job's timeout (GRADSYNC_TIMEOUT); the message names who is missing."""


class StateLostError(TimeoutError):
    """Every worker holding an elastic job's state was lost: resume from a checkpoint."""


class ProtocolError(GradsyncError):
    """Malformed data from a peer, or a refused handshake (another job's token)."""


class DataError(GradsyncError):
    """A file or a saved state is missing, truncated, corrupt or of another run."""


class SystemCallError(GradsyncError, OSError):
    """A system call failed (C++'s SystemError; the errno text is in the message)."""


class InternalError(GradsyncError):
    """A broken invariant inside gradsync: a bug, please report it."""


CLASSES = {
    cls.__name__: cls
    for cls in (GradsyncError, ConfigError, PeerLostError, TimeoutError, StateLostError,
                ProtocolError, DataError, SystemCallError, InternalError)
}
