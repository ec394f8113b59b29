"""Drivers that run the sans-IO endpoints over a network (imported as ``epto.transports``).

Every driver runs one loop over an :class:`epto.endpoint.Endpoint`
(:mod:`epto.transports._loop`). The node classes live in their modules so
that importing this package needs neither trio nor pyzmq:

* :class:`epto.transports.memory.MemoryNode` and ``MemoryHub``: in one trio
  event loop, real time;
* :class:`epto.transports.trio_udp.UdpNode`: EpTO on UDP datagrams with trio;
* :class:`epto.transports.zmq_node.ZmqNode`: EpTO on ZeroMQ, synchronous and thread-safe;
* :class:`epto.transports.trio_tcp.TokenRingNode`: the token ring on TCP with trio
  (``TcpNode`` there runs any stream endpoint);
* :class:`epto.transports.trio_atoms.AtomsNode`: sequencing atoms on TCP with trio;
* :class:`epto.transports.blocking.BlockingNode`: any trio node (EpTO or the
  token ring, ``mode="auto"`` included) on a thread of its own, synchronous
  and thread-safe.

Every node takes a :class:`NodeConfig` (the TCP nodes the transport's settings
beside it, derived from it by default); ``NodeConfig.mode`` chooses the ordering engine, and
on trio :func:`open_node` (``epto.transports.open_node``, from
:mod:`epto.transports.trio_node`, loaded on first use) opens the node it
asks for.
"""

from epto.endpoint import Mode as Mode
from epto.endpoint import NodeConfig as NodeConfig
from epto.endpoint import OverflowPolicy as OverflowPolicy

from ._loop import DeliveryOverflowError as DeliveryOverflowError
from ._statistics import TransportStatistics as TransportStatistics

# isort: split
import typing as _typing

from epto._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from .trio_node import open_node as open_node

# ``open_node`` loads its module (and trio) on first use (PEP 562), so that
# importing this package still needs neither trio nor pyzmq.
_LAZY: dict[str, str] = {"open_node": ".trio_node"}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY)

__all__ = [
    "DeliveryOverflowError",
    "Mode",
    "NodeConfig",
    "OverflowPolicy",
    "TransportStatistics",
    "open_node",
]
