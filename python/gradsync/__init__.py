"""gradsync: communication-efficient data-parallel training (C++ core, command line, Python).

PyTorch programs use ``import gradsync.torch as gs`` (docs/python.md); this top-level package
only holds the version and the compiled core (``gradsync._C``, loaded by ``gradsync.torch``).
"""

__version__ = "0.1.0"
