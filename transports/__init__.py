"""Drivers that run the sans-IO core over a network (imported as ``epto.transports``).

The node classes live in their modules so that importing this package needs
neither trio nor pyzmq:

* :class:`epto.transports.memory.MemoryNode` and ``MemoryHub``: in one trio
  event loop, real time;
* :class:`epto.transports.trio_udp.TrioNode`: UDP datagrams with trio;
* :class:`epto.transports.zmq_node.ZmqNode`: ZeroMQ, synchronous and thread-safe;
* :class:`epto.transports.trio_tcp.TokenRingNode`: the token ring over TCP with trio.

Every EpTO node takes a :class:`NodeConfig` and reports :class:`TransportStatistics`.
``NodeConfig.mode`` chooses the ordering engine; on trio,
:func:`epto.transports.trio_node.open_node` opens the node it asks for.
"""

from ._common import Codec as Codec
from ._common import DeliveryOverflowError as DeliveryOverflowError
from ._common import Mode as Mode
from ._common import NodeConfig as NodeConfig
from ._common import OverflowPolicy as OverflowPolicy
from ._common import TransportStatistics as TransportStatistics
