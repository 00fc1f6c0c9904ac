"""Horovod's hvd.elastic from Python: not available yet, and said so at the first use.

gradsync's elastic training (workers that leave and join between rounds) is `gradsync train
--elastic MIN:MAX` (docs/cli.md, "Elastic training"); the Python package has no way yet to
re-form a job when a rank is lost, so hvd.elastic.run, TorchState and ObjectState raise a
ConfigError that says so instead of running a loop that could not survive a failure.
"""

from ._errors import ConfigError

_WHY = ("hvd.elastic is not available from Python yet: a gradsync.torch job cannot re-form "
        "after a lost rank. Elastic training runs as `gradsync train --elastic MIN:MAX` "
        "(docs/cli.md); a Python job fails fast with gs.PeerLostError naming the lost rank")


def run(func):
    raise ConfigError(_WHY)


class State:
    def __init__(self, *args, **kwargs):
        raise ConfigError(_WHY)


class TorchState(State):
    pass


class ObjectState(State):
    pass
