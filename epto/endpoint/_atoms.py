"""The sequencing-atoms endpoint: one :class:`epto.atoms.AtomsProcess`, its
frame codec and sealer, and the nodes' addresses.

Rules:

* links must be reliable and FIFO (a stream transport: TCP);
* a publication larger than ``limits.max_payload_size`` is refused before
  the process numbers it;
* every frame is encoded for its receiver; without a sealer a message sent
  to every member of a group is encoded once;
* every stream opens with this node's own address (a small frame, within a
  receiver's first-frame limit); address frames received fill the
  directory;
* flushed: every publication of this node has come back to it delivered
  (a node publishes only to its own groups), so every atom has numbered it,
  or was lost with a crashed host (counted in the process's ``lost``);
* the graph changes at run time only through the coordinator's
  :meth:`AtomsHandle.reconfigure` (``endpoint.engine``; docs/atoms.md, "Groups that change at
  run time").
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

import attrs

from .._errors import ConfigurationError, LocalProtocolError
from .._event import Delivery, EventId, ProcessId
from ..atoms._messages import atoms_registry
from ..atoms._process import AtomsProcess, AtomsStatistics
from ._addresses import Directory, with_addresses
from ._config import Address, NodeConfig, endpoint_codec
from ._engines import AtomsAdapter
from ._handles import EngineHandle
from ._protocol import Transmit
from ._signatures import Signatures
from ._streams import StreamFraming


@attrs.frozen(kw_only=True, slots=True)
class AtomsEndpointStatistics:
    """The process's counters and the endpoint's."""

    process: AtomsStatistics
    broadcasts: int
    delivered: int
    rejected: Mapping[str, int]
    encode_failures: int


class AtomsEndpoint:
    """Sequencing atoms behind the endpoint protocol (:class:`epto.endpoint.Endpoint`),
    built from a :class:`NodeConfig` (``mode="atoms"``) like every endpoint.

    ``config.atoms`` holds what every node shares: the sequencing graph
    every node builds from the same membership
    (:class:`epto.atoms.SequencingGraph`), and :class:`epto.atoms.AtomsProcess`'s
    ``nodes`` (by default those of ``config.members``), ``coordinator``
    (by default the smallest of them) and ``suspect_after`` (the crash
    detector's silence; none by default). ``config.members`` maps every node
    to ``"host:port"``; ``config.group`` is the id every frame carries
    (frames of other ids are refused). :meth:`broadcast` publishes to this
    node's group when it has exactly one; ``engine.publish``
    (:class:`~epto.endpoint.AtomsHandle`) names the group. ``wall``
    (wall-clock seconds, default ``now``) starts the sealer's nonce counter.
    A signed group sets ``signing_key`` (this node's Ed25519 private key)
    and ``roster`` (every node's public key) at every node, as for the
    other engines (:mod:`._signatures`): publications are signed by their
    origin and checked on arrival, and a refused one is counted in
    ``statistics().rejected``.
    """

    def __init__(
        self,
        config: NodeConfig,
        now: float,
        *,
        rng: random.Random,
        wall: float | None = None,
    ) -> None:
        settings = config.atoms
        if settings is None:
            raise ConfigurationError("AtomsEndpoint: the configuration has no atoms settings")
        pid = config.pid
        limits = config.limits
        addresses = config.members
        self._pid = pid
        self.limits = limits
        signatures = Signatures(pid, config.signing_key, config.roster)
        self._process = AtomsProcess(
            pid,
            settings.graph,
            max_pending=settings.max_pending,
            nodes=addresses.keys() if settings.nodes is None else settings.nodes,
            coordinator=settings.coordinator,
            suspect_after=settings.suspect_after,
            signer=signatures.signer,
            verifier=signatures.check,
        )
        self.adapter = AtomsAdapter(self._process, limits=limits)
        """The process at the message level: the payload limit, flushed
        (:mod:`._engines`); ``adapter.engine`` is the process."""
        mine = sorted(self._process.groups)
        self.default_group = mine[0] if len(mine) == 1 else None
        """The group :meth:`broadcast` publishes to: this node's, when it
        started in exactly one."""
        codec = endpoint_codec(
            pid=pid,
            group=config.group,
            limits=limits,
            group_key=config.group_key,
            wall=now if wall is None else wall,
            rng=rng,
            registry=with_addresses(atoms_registry()),
        )
        self._directory = Directory(pid, dict(addresses))
        self._directory.advertised = addresses.get(pid, "")
        self._framing = StreamFraming(pid, codec, self._directory)
        self.engine = AtomsHandle(self)
        """Publishing to one group, the coordinator's changes of the graph:
        :class:`~epto.endpoint.AtomsHandle`."""

    @property
    def pid(self) -> ProcessId:
        return self._pid

    def set_advertised(self, address: Address) -> None:
        self._directory.advertised = address

    def address_of(self, pid: ProcessId) -> Address | None:
        return self._directory.addresses.get(pid)

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """Publish to :attr:`default_group` (``engine.publish`` names a group)."""
        if self.default_group is None:
            raise LocalProtocolError(
                f"node {self._pid} is in several groups {sorted(self._process.groups)}: "
                "engine.publish(group, payload) names one"
            )
        return self.adapter.publish(self.default_group, payload)

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        process = self._process
        return self._framing.receive(
            data, now, peer_host, lambda sender, message: process.receive(sender, message, now)
        )

    def reject(self, fault: str) -> None:
        self._framing.codec.rejected[fault] += 1

    def handle_timer(self, now: float) -> None:
        self._process.handle_timer(now)  # the crash detector, if any

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        return self._process.get_timer()

    def output_pending(self) -> bool:
        return True  # every input may route or deliver at once

    def frames_to_send(self, now: float) -> list[Transmit]:
        return self._framing.frames(self._process.messages_to_send())

    def opening(self, dest: ProcessId) -> list[bytes]:
        return self._framing.opener(dest)

    def next_delivery(self) -> Delivery | None:
        return self._process.next_delivery()

    def flushed(self) -> bool:
        return self.adapter.flushed()

    def statistics(self) -> AtomsEndpointStatistics:
        s = self._process.statistics()
        return AtomsEndpointStatistics(
            process=s,
            broadcasts=s.broadcasts,
            delivered=s.delivered,
            rejected=self._framing.rejected(s.rejected),
            encode_failures=self._framing.encode_failures,
        )


class AtomsHandle(EngineHandle):
    """Sequencing atoms' own operations (:class:`~epto.endpoint.AtomsEndpoint`):
    publishing to one group, and the coordinator's changes of the graph
    (docs/atoms.md, "Groups that change at run time")."""

    __slots__ = ("_endpoint",)

    def __init__(self, endpoint: AtomsEndpoint) -> None:
        super().__init__()
        self._endpoint = endpoint

    def publish(self, group: int, payload: bytes) -> EventId:
        """Send ``payload`` to the members of ``group`` (this node is one),
        in the pairwise order."""
        with self._input:
            return self._endpoint.adapter.publish(group, payload)

    def reconfigure(
        self, *, remove: Iterable[int] = (), add: Mapping[int, Iterable[ProcessId]] | None = None
    ) -> int:
        """At the coordinator: the next graph version, without the groups of
        ``remove`` and with those of ``add``, installed here and sent to
        every node (:meth:`epto.atoms.AtomsProcess.reconfigure`); returns its epoch."""
        with self._input:
            return self._endpoint.adapter.process.reconfigure(remove=remove, add=add)

    def add_group(self, group: int, members: Iterable[ProcessId]) -> int:
        """At the coordinator: a new epoch with ``group`` added."""
        return self.reconfigure(add={group: members})

    def remove_group(self, group: int) -> int:
        """At the coordinator: a new epoch without ``group``."""
        return self.reconfigure(remove=[group])

    def replace_crashed(self, crashed: ProcessId) -> int:
        """At the coordinator: ``crashed`` is down for good; its atoms move to
        the node the process chooses (:meth:`epto.atoms.AtomsProcess.replace_crashed`)."""
        with self._input:
            return self._endpoint.adapter.process.replace_crashed(crashed)

    @property
    def process(self) -> AtomsProcess:
        """The sans-IO atoms process inside (for inspection)."""
        return self._endpoint.adapter.process

    @property
    def epoch(self) -> int:
        """The latest graph version installed at this node."""
        with self._input:
            return self._endpoint.adapter.process.epoch
