"""Endpoints: every ordering engine behind one sans-IO protocol that speaks bytes.

An endpoint owns an engine (EpTO with its peer sampler, or the token ring),
its frame codec and sealer, the members' addresses and every protocol
decision around them (payload limits, frames bound to their receiver, hole
accounting, flushing, address frames). A driver feeds it bytes and ``now``,
sends the frames it hands out, and moves its deliveries to the application;
it runs one loop, written once (``epto.transports``), for every engine::

    endpoint = EptoEndpoint(
        NodeConfig(pid=1, members=members), now=time.time(), rng=random.Random(seed)
    )
    endpoint.broadcast(b"hello", now)
    endpoint.receive(datagram, now)
    for transmit in endpoint.frames_to_send(now):
        sock.sendto(transmit.data, parse_host_port(transmit.address))
    while (delivery := endpoint.next_delivery()) is not None:
        ...
    sleep_until(endpoint.get_timer()); endpoint.handle_timer(now)

What only some engines do is a capability the driver asks for once
(:class:`Leaving`, :class:`Stoppable`, :class:`Eager`, :class:`ViewAware`,
:class:`StreamEndpoint`); what only one engine can be asked is on its typed
handle, ``endpoint.engine`` (:class:`EptoHandle`, :class:`TokenRingHandle`,
:class:`AtomsHandle`).

See docs/architecture.md.
"""

from ._addresses import AddressBook as AddressBook
from ._addresses import join_host_port as join_host_port
from ._atoms import AtomsEndpoint as AtomsEndpoint
from ._atoms import AtomsEndpointStatistics as AtomsEndpointStatistics
from ._atoms import AtomsHandle as AtomsHandle
from ._config import Address as Address
from ._config import Mode as Mode
from ._config import NodeConfig as NodeConfig
from ._config import OverflowPolicy as OverflowPolicy
from ._config import parse_host_port as parse_host_port
from ._engines import AtomsAdapter as AtomsAdapter
from ._engines import EptoAdapter as EptoAdapter
from ._engines import TokenRingAdapter as TokenRingAdapter
from ._epto import EptoEndpoint as EptoEndpoint
from ._epto import EptoEndpointStatistics as EptoEndpointStatistics
from ._epto import EptoHandle as EptoHandle
from ._handles import EngineHandle as EngineHandle
from ._ordering import Ordering as Ordering
from ._ordering import ordering_of as ordering_of
from ._protocol import Eager as Eager
from ._protocol import Endpoint as Endpoint
from ._protocol import EndpointStatistics as EndpointStatistics
from ._protocol import Leaving as Leaving
from ._protocol import Stoppable as Stoppable
from ._protocol import StreamEndpoint as StreamEndpoint
from ._protocol import Transmit as Transmit
from ._protocol import ViewAware as ViewAware
from ._tokenring import OPENER_MAX as OPENER_MAX
from ._tokenring import TokenRingEndpoint as TokenRingEndpoint
from ._tokenring import TokenRingEndpointStatistics as TokenRingEndpointStatistics
from ._tokenring import TokenRingHandle as TokenRingHandle

__all__ = [
    "OPENER_MAX",
    "Address",
    "AddressBook",
    "AtomsAdapter",
    "AtomsEndpoint",
    "AtomsEndpointStatistics",
    "AtomsHandle",
    "Eager",
    "Endpoint",
    "EndpointStatistics",
    "EptoAdapter",
    "EptoEndpoint",
    "EptoEndpointStatistics",
    "EptoHandle",
    "EngineHandle",
    "Leaving",
    "Mode",
    "NodeConfig",
    "Ordering",
    "OverflowPolicy",
    "Stoppable",
    "StreamEndpoint",
    "TokenRingAdapter",
    "TokenRingEndpoint",
    "TokenRingEndpointStatistics",
    "TokenRingHandle",
    "Transmit",
    "ViewAware",
    "join_host_port",
    "ordering_of",
    "parse_host_port",
]
