"""EpTO (Matos, Mercier, Felber, Oliveira, Pereira, "EpTO: an epidemic total
order algorithm for large-scale distributed systems") as a sans-IO engine: the
process (rounds, dissemination, clocks and the ordering rules), its
configuration, and the peer samplers beside it (a full view, or Cyclon).

:class:`Process` takes ``now`` as an argument and returns what it wants sent;
:class:`Node` is a process with its peer sampler. Applications usually open a
node from :mod:`epto.transports` instead (docs/epto.md). Modules whose names
start with an underscore are private.
"""

from ._config import ClockKind as ClockKind
from ._config import Config as Config
from ._config import OrderingKind as OrderingKind
from ._cyclon import Cyclon as Cyclon
from ._cyclon import CyclonConfig as CyclonConfig
from ._cyclon import CyclonStatistics as CyclonStatistics
from ._node import Node as Node
from ._node import NodeStatistics as NodeStatistics
from ._params import Parameters as Parameters
from ._params import derive_parameters as derive_parameters
from ._peer_messages import PeerDescriptor as PeerDescriptor
from ._process import Process as Process
from ._process import ProcessStatistics as ProcessStatistics
from ._sampler import FullView as FullView
from ._sampler import Membership as Membership
from ._sampler import PeerSampler as PeerSampler

__all__ = [
    "ClockKind",
    "Config",
    "Cyclon",
    "CyclonConfig",
    "CyclonStatistics",
    "FullView",
    "Membership",
    "Node",
    "NodeStatistics",
    "OrderingKind",
    "Parameters",
    "PeerDescriptor",
    "PeerSampler",
    "Process",
    "ProcessStatistics",
    "derive_parameters",
]
