"""One node of the sequencing-atoms engine, sans-IO: it plays the atoms it
hosts, assigns group-local numbers for the groups whose ingress it is, and
delivers the messages of its groups in the stamped order, across graph
versions (epochs) that change at run time.

Rules (seed 003, restated in docs/atoms.md):

1. **Ingress.** A member publishes to its group's ingress in the current
   epoch, which gives the message the next group-local number of that
   epoch. The number is assigned there and not by the sender: two senders'
   messages reach the first atom in one order only once they share a link.
2. **Route.** The message then passes the group's route in its epoch's
   graph; an atom that serves the group gives it its next number (a
   *stamp*), the others only forward it. Atoms on one host are passed
   without a message; between hosts, links are reliable and FIFO.
3. **Distribution.** After the last atom (or at the ingress, for a group
   with no double overlap) the message goes to every member of the group.
4. **Delivery.** A member ``r`` delivers a message of group ``G`` once its
   group-local number is the next one of ``G`` and, for every stamp
   ``(A, n)`` with ``r`` in ``A``'s overlap, ``n`` is the next number of
   ``A`` at ``r``. Two messages both delivered by two members are ordered by
   a common atom (or are of one group); C2 keeps receivers from waiting on
   each other in a circle.
5. **Epochs.** The coordinator (one node named in the configuration) is the
   only one that changes the graph: it applies a change (groups
   added, removed, a crashed host replaced) to epoch ``e``'s graph and sends
   it to every node, which applies it in turn: epoch ``e + 1`` starts. Every
   message carries its epoch; counters start again at 0 in each epoch; a
   receiver delivers **every message of epoch e before any of epoch e + 1**,
   which keeps pairwise order across the switch (each epoch is ordered by
   its own graph).
6. **End of an epoch.** On installing ``e + 1`` a node sends, for each of its
   groups of epoch ``e``, a marker (:class:`EpochEnd`, stage publisher) to
   the group's ingress of epoch ``e``, behind its last publication of that
   epoch (FIFO). Once the ingress has every live member's marker it closes
   the group's epoch: a route marker follows the group's route behind its
   last message and then goes to every member. A member holding the route
   markers of all its groups of epoch ``e`` has all their messages and
   moves on to ``e + 1``. Publications of ``e + 1`` meanwhile go to the new
   ingresses and wait there, and at the receivers, until their turn.
7. **A crashed host** (:meth:`AtomsProcess.replace_crashed`): the change
   names it and its
   replacement. From then on nothing is sent to it, whatever it sent is
   dropped, nobody waits for its markers (the next live place of each route
   passes the marker on as if it had come) and, in later epochs, its atoms
   are played by the replacement. What it held is lost: publications it
   had not numbered, messages it had not passed on (and, as a distributor,
   had passed to some members only). Receivers then end the epoch without
   them: the messages they hold are delivered in an order that respects
   every group-local number and every stamp they carry (a topological order
   with the gaps left out), which two receivers agree on for every pair of
   messages they both deliver, since such a pair is ordered by a common atom
   or group. Nothing waits for a lost message.
8. **Hostile input** is refused and counted, never raised: a message for an
   unknown group or a stale epoch, to a node that is not the place its hop
   names, from a node that is not the previous place of the route, with
   stamps that are not those of the atoms passed, after its epoch's marker,
   a publication from a non-member or a repeated one, a change that is not
   the coordinator's next valid one, anything from a crashed node, beyond
   ``max_pending`` buffered messages.

Size: about 800 lines, because the rules above are one state machine:
every message is checked, routed and delivered against the epoch it
carries, and the end of an epoch (markers, crashed nodes, the last
deliveries) moves the same counters the ordering does; split in two, each
half would reach into the other's state. The epoch's frozen graph is in
``_layout.py``, the frames in ``_messages.py``.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import attrs

from .._errors import LocalProtocolError
from .._event import Delivery, DeliveryTag, Event, EventId, ProcessId
from ._graph import SequencingGraph
from ._layout import Layout
from ._messages import (
    PUBLISHER,
    ROUTE,
    AddGroup,
    Alive,
    Change,
    ChangeOp,
    EpochEnd,
    Publish,
    RemoveGroup,
    ReplaceHost,
    Sequenced,
    publication,
)

Message = Publish | Sequenced | Change | EpochEnd | Alive

_U32_LIMIT = 1 << 32


@attrs.frozen(kw_only=True, slots=True)
class AtomsStatistics:
    """The counters of one node."""

    broadcasts: int
    delivered: int
    sequenced: int
    """Group-local numbers this node assigned (as an ingress)."""
    stamped: int
    """Stamps this node's atoms gave."""
    forwarded: int
    """Messages sent on along a route or to the members."""
    pending: int
    """Messages received and waiting for their turn."""
    rejected: dict[str, int]
    epoch: int = 0
    """The latest graph version installed here."""
    delivering_epoch: int = 0
    """The epoch whose messages this node delivers now."""
    lost: int = 0
    """This node's publications that never came back: lost with a crashed host."""
    dropped: int = 0
    """Messages not sent because their destination has crashed."""
    abandoned: int = 0
    """Messages given up at the end of an epoch because no order respected
    their stamps (never expected; counted to be seen)."""


class _Epoch:
    """What one node keeps of one epoch until its part in it is over."""

    __slots__ = (
        "atom_next",
        "awaiting",
        "ended",
        "expect_atom",
        "expect_local",
        "layout",
        "local_next",
        "marked",
        "mine",
        "open_runs",
        "waiting",
    )

    def __init__(self, pid: ProcessId, layout: Layout) -> None:
        self.layout = layout
        self.mine = frozenset(g for g, members in layout.groups.items() if pid in members)
        self.atom_next = {a: 0 for a, host in layout.hosts.items() if host == pid}
        ingress_of = [g for g, node in layout.ingress.items() if node == pid]
        self.local_next = dict.fromkeys(ingress_of, 0)
        # Ingress: the members whose publisher marker is still awaited, per
        # open group, and those already heard.
        self.awaiting = {g: set(layout.groups[g]) for g in ingress_of}
        self.marked: dict[int, set[ProcessId]] = {g: set() for g in ingress_of}
        # Host: the runs of route atoms whose marker has not passed yet.
        self.open_runs = {(g, k) for g in layout.groups for k in layout.runs(g, pid)}
        # Receiver.
        self.expect_local = dict.fromkeys(self.mine, 0)
        self.expect_atom = {a: 0 for a, overlap in layout.overlaps.items() if pid in overlap}
        self.waiting: dict[int, dict[int, Sequenced]] = {g: {} for g in self.mine}
        self.ended: set[int] = set()


class AtomsProcess:
    """One node; see the module docstring for the rules.

    Inputs: :meth:`publish`, :meth:`receive`, and at the coordinator
    :meth:`reconfigure`, :meth:`add_group`, :meth:`remove_group` and
    :meth:`replace_crashed`. Outputs, pulled: :meth:`messages_to_send`,
    :meth:`next_delivery`. No timer: every decision is taken on an input.

    ``nodes`` is every node of the deployment (by default the members of the
    graph's groups and its atoms' hosts); ``coordinator`` the node that
    changes the graph (by default the smallest of ``nodes``). Every node
    must be given the same graph, nodes and coordinator. ``suspect_after``
    (seconds, the same at every node) turns on the crash detector (rule 7);
    without it there is no timer.

    A signed group (docs/security.md) passes the hooks every engine takes:
    ``signer(event) -> signature`` signs this node's publications
    (:func:`~._messages.publication`), and ``verifier(event) -> fault | None``
    checks every publication that arrives (from its origin, or on its
    route) before anything else; a refused one is counted by fault
    (``bad-signature``, ``unsigned``, ``unknown-source``, ``altered``,
    ``equivocation``) and dropped.
    """

    def __init__(
        self,
        pid: ProcessId,
        graph: SequencingGraph,
        *,
        max_pending: int = 100_000,
        nodes: Collection[ProcessId] | None = None,
        coordinator: ProcessId | None = None,
        suspect_after: float | None = None,
        signer: Callable[[Event], bytes] | None = None,
        verifier: Callable[[Event], str | None] | None = None,
    ) -> None:
        self._signer = signer
        self._verifier = verifier
        if suspect_after is not None and not suspect_after > 0:
            raise LocalProtocolError(f"suspect_after must be positive, got {suspect_after!r}")
        self.pid = pid
        self.max_pending = max_pending
        self.suspect_after = suspect_after
        self._heard: dict[ProcessId, float] = {}
        self._next_beat = float("-inf")
        self._graph = graph  # never changed: each change works on a copy (it may be shared)
        if nodes is None:
            every = {p for members in graph.groups.values() for p in members}
            nodes = every | {a.host for a in graph.atoms.values()}
        self.nodes = frozenset(nodes) | {pid}
        self.coordinator = min(self.nodes) if coordinator is None else coordinator
        self._dead: set[ProcessId] = set()
        self._moved: dict[ProcessId, ProcessId] = {}
        self._epochs = {0: _Epoch(pid, Layout.of(0, graph, self._moved))}
        self._latest = 0
        self._delivering = 0
        self._early: list[tuple[ProcessId, Message]] = []
        self._published: dict[ProcessId, int] = {}
        self._pending = 0
        self._own_seq = 0
        self._own: dict[EventId, int] = {}
        self._turn = 0
        self.last_group: int | None = None
        """The group of this node's latest publication."""
        self._outbox: list[tuple[ProcessId, Message]] = []
        self._deliveries: deque[Delivery] = deque()
        self._counts = dict.fromkeys(
            (
                "broadcasts",
                "delivered",
                "sequenced",
                "stamped",
                "forwarded",
                "lost",
                "dropped",
                "abandoned",
            ),
            0,
        )
        self._rejected: dict[str, int] = {}

    # -- reading ------------------------------------------------------------

    @property
    def graph(self) -> SequencingGraph:
        """The graph of the latest epoch installed here."""
        return self._graph

    @property
    def epoch(self) -> int:
        """The latest epoch installed here (publications go to it)."""
        return self._latest

    @property
    def groups(self) -> frozenset[int]:
        """The groups this node is a member of in the latest epoch."""
        return self._epochs[self._latest].mine

    def members(self, group: int) -> frozenset[int]:
        """The members of ``group`` in the latest epoch (KeyError if none)."""
        return self._epochs[self._latest].layout.groups[group]

    @property
    def hosts(self) -> Mapping[int, ProcessId]:
        """Atom -> the node that plays it in the latest epoch (the graph's
        host, or the replacement of a crashed one)."""
        return self._epochs[self._latest].layout.hosts

    @property
    def crashed(self) -> frozenset[ProcessId]:
        """The nodes declared crashed so far."""
        return frozenset(self._dead)

    def outstanding(self) -> int:
        """This node's publications not yet delivered back to it nor lost."""
        return len(self._own)

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float = 0.0) -> EventId:
        """Publish ``payload`` to this node's groups in turn (ascending ids):
        the engine-neutral input of simulations and workloads. Applications
        name the group with :meth:`publish`."""
        mine = sorted(self.groups)
        if not mine:
            raise LocalProtocolError(f"node {self.pid} is in no group")
        group = mine[self._turn % len(mine)]
        self._turn += 1
        return self.publish(group, payload)

    def publish(self, group: int, payload: bytes) -> EventId:
        """Send ``payload`` to the members of ``group`` (this node must be one)."""
        state = self._epochs[self._latest]
        if group not in state.mine:
            raise LocalProtocolError(f"node {self.pid} is not a member of group {group}")
        self.last_group = group
        seq = self._own_seq
        self._own_seq += 1
        self._counts["broadcasts"] += 1
        eid = (self.pid, seq)
        self._own[eid] = self._latest
        signature = b""
        if self._signer is not None:
            signature = self._signer(publication(self.pid, seq, group, payload, b""))
        message = Publish(group, self._latest, seq, payload, signature)
        ingress = state.layout.ingress[group]
        if ingress == self.pid:
            self._on_publish(state, self.pid, message)
        else:
            self._send(ingress, message)
        return eid

    def receive(self, sender: ProcessId, message: object, now: float = 0.0) -> None:
        """One message from ``sender`` (over a reliable FIFO link); ``now``
        matters only to the coordinator's crash detector."""
        if (
            self.suspect_after is not None
            and self.pid == self.coordinator
            and sender in self.nodes
            and sender not in self._dead
            and sender != self.pid
        ):
            self._heard[sender] = now
        fault = None
        if self._verifier is not None:
            fault = self._verify(sender, message)
        if fault is None:
            fault = self._receive(sender, message)
        if fault is not None:
            self._rejected[fault] = self._rejected.get(fault, 0) + 1

    def reconfigure(
        self,
        *,
        remove: Iterable[int] = (),
        add: Mapping[int, Iterable[ProcessId]] | None = None,
    ) -> int:
        """At the coordinator: install the next epoch, here and (by a change
        message) at every live node: the current graph without the groups of
        ``remove``, then with those of ``add`` (group -> members; a group both
        removed and added changes its membership). Returns the new epoch.
        LocalProtocolError if this node is not the coordinator or the change
        does not apply (a group added that exists, removed that does not, a
        member that is not a live node of the deployment)."""
        ops: list[ChangeOp] = [RemoveGroup(g) for g in sorted(set(remove))]
        ops.extend(AddGroup(g, frozenset(m)) for g, m in sorted((add or {}).items()))
        return self._reconfigure(ops)

    def add_group(self, group: int, members: Iterable[ProcessId]) -> int:
        """At the coordinator: a new epoch with ``group`` added."""
        return self.reconfigure(add={group: members})

    def remove_group(self, group: int) -> int:
        """At the coordinator: a new epoch without ``group``."""
        return self.reconfigure(remove=[group])

    def replace_crashed(self, crashed: ProcessId) -> int:
        """At the coordinator: declare ``crashed`` down for good and move its
        atoms, in a new epoch, to the live node that is a member of most of
        their overlaps (ties: the smallest id; without atoms, the smallest
        live node). Returns the new epoch."""
        live = sorted(self.nodes - self._dead - {crashed})
        if not live:
            raise LocalProtocolError("no live node to take the atoms")
        layout = self._epochs[self._latest].layout
        overlaps = [layout.overlaps[a] for a, host in layout.hosts.items() if host == crashed]
        best = min(live, key=lambda n: (-sum(n in o for o in overlaps), n))
        return self._reconfigure([ReplaceHost(crashed, best)])

    def _reconfigure(self, ops: Sequence[ChangeOp]) -> int:
        if self.pid != self.coordinator:
            raise LocalProtocolError(f"node {self.pid} is not the coordinator")
        change = Change(self._latest + 1, tuple(ops))
        fault = self._check_ops(change.ops)
        if fault is not None:
            raise LocalProtocolError(f"the change does not apply: {fault}")
        graph = self._changed_graph(change.ops)
        if graph is None:
            raise LocalProtocolError("the change does not apply: the graph refuses it")
        gone = {op.crashed for op in change.ops if type(op) is ReplaceHost}
        for node in sorted(self.nodes - self._dead - gone - {self.pid}):
            self._outbox.append((node, change))  # before anything of the new epoch
        self._install(change, graph)
        return change.epoch

    # -- dispatch and checks ---------------------------------------------------

    def _verify(self, sender: ProcessId, m: object) -> str | None:
        """The verifier's fault for a publication (from its origin, or on
        its route), else None."""
        assert self._verifier is not None
        if type(m) is Publish:
            return self._verifier(
                publication(sender, m.origin_seq, m.group, m.payload, m.signature)
            )
        if type(m) is Sequenced:
            return self._verifier(
                publication(m.origin, m.origin_seq, m.group, m.payload, m.signature)
            )
        return None

    def _receive(self, sender: ProcessId, m: object) -> str | None:
        if sender in self._dead:
            return "from-crashed"
        if type(m) is Change:
            return self._on_change(sender, m)
        if type(m) is Alive:
            return None if self.pid == self.coordinator else "not-coordinator"
        if type(m) is not Publish and type(m) is not Sequenced and type(m) is not EpochEnd:
            return "unknown-message"
        if m.epoch > self._latest:
            if len(self._early) >= self.max_pending:
                return "buffer-full"
            self._early.append((sender, m))
            return None
        state = self._epochs.get(m.epoch)
        if state is None:
            return "stale-epoch"
        if type(m) is Publish:
            fault = self._check_publish(state, sender, m)
            if fault is None:
                self._on_publish(state, sender, m)
            return fault
        if type(m) is Sequenced:
            fault = self._check_sequenced(state, sender, m)
            if fault is None:
                if m.hop == len(state.layout.routes[m.group]):
                    self._arrive(state, m)  # past its last atom: a delivery
                else:
                    self._on_route(state, m)
            return fault
        assert type(m) is EpochEnd
        return self._on_epoch_end(state, sender, m)

    def _check_publish(self, state: _Epoch, sender: ProcessId, m: Publish) -> str | None:
        members = state.layout.groups.get(m.group)
        if members is None:
            return "unknown-group"
        if m.group not in state.local_next:
            return "not-ingress"
        if sender not in members:
            return "not-a-member"
        if m.group not in state.awaiting or sender in state.marked[m.group]:
            return "after-end"
        last = self._published.get(sender)
        if last is not None and m.origin_seq <= last:
            return "repeated"
        return None

    def _check_hop(self, state: _Epoch, sender: ProcessId, group: int, hop: int) -> str | None:
        """The checks a message of ``group`` for ``hop`` shares with its marker."""
        layout = state.layout
        route = layout.routes.get(group)
        if route is None:
            return "unknown-group"
        if not (1 <= hop <= len(route) or hop == len(route) == 0):
            return "bad-hop"
        if sender != layout.previous(group, hop):
            return "bad-source"
        if hop < len(route):
            if layout.hosts[route[hop]] != self.pid:
                return "not-here"
            if layout.hosts[route[hop - 1]] == self.pid:
                return "bad-hop"  # the middle of a run of atoms played here
            if (group, hop) not in state.open_runs:
                return "after-end"
        elif group not in state.mine:
            return "not-a-member"
        elif group in state.ended or self._delivering > layout.epoch:
            return "after-end"
        return None

    def _check_sequenced(self, state: _Epoch, sender: ProcessId, m: Sequenced) -> str | None:
        fault = self._check_hop(state, sender, m.group, m.hop)
        if fault is not None:
            return fault
        layout = state.layout
        stamping = layout.stamping[m.group]
        passed = tuple(a for a in layout.routes[m.group][: m.hop] if a in stamping)
        if tuple(atom for atom, _ in m.stamps) != passed:
            return "bad-stamps"
        if m.hop == len(layout.routes[m.group]) and self._pending >= self.max_pending:
            return "buffer-full"
        return None

    # -- ordering -----------------------------------------------------------

    def _send(self, dest: ProcessId, m: Message) -> None:
        if dest in self._dead:
            self._counts["dropped"] += 1
        else:
            self._outbox.append((dest, m))

    def _on_publish(self, state: _Epoch, origin: ProcessId, m: Publish) -> None:
        self._published[origin] = m.origin_seq
        local = state.local_next[m.group]
        state.local_next[m.group] = local + 1
        self._counts["sequenced"] += 1
        sequenced = Sequenced(
            m.group, m.epoch, local, origin, m.origin_seq, 0, (), m.payload, m.signature
        )
        self._on_route(state, sequenced)

    def _on_route(self, state: _Epoch, m: Sequenced) -> None:
        """Pass ``m`` through the atoms of its route hosted here, then send it on."""
        layout = state.layout
        route = layout.routes[m.group]
        stamping = layout.stamping[m.group]
        hosts = layout.hosts
        hop = m.hop
        stamps = m.stamps
        while hop < len(route) and hosts[route[hop]] == self.pid:
            atom = route[hop]
            if atom in stamping:
                stamps = (*stamps, (atom, state.atom_next[atom]))
                state.atom_next[atom] += 1
                self._counts["stamped"] += 1
            hop += 1
        m = attrs.evolve(m, hop=hop, stamps=stamps)
        if hop < len(route):
            self._counts["forwarded"] += 1
            self._send(hosts[route[hop]], m)
            return
        for member in sorted(layout.groups[m.group]):
            if member == self.pid:
                self._arrive(state, m)
            else:
                self._counts["forwarded"] += 1
                self._send(member, m)

    def _arrive(self, state: _Epoch, m: Sequenced) -> None:
        waiting = state.waiting[m.group]
        if m.local < state.expect_local[m.group] or m.local in waiting:
            self._rejected["repeated"] = self._rejected.get("repeated", 0) + 1
            return
        waiting[m.local] = m
        self._pending += 1
        if state.layout.epoch == self._delivering:
            self._deliver_ready(state, m.group)

    def _ready(self, state: _Epoch, m: Sequenced) -> bool:
        expect = state.expect_atom
        return all(expect.get(atom, number) == number for atom, number in m.stamps)

    def _deliver_ready(self, state: _Epoch, group: int) -> None:
        """Deliver what is ready, starting from ``group``; a delivery may make
        the head of another group ready (it advanced an atom's counter)."""
        todo = [group]
        stamping = state.layout.stamping
        while todo:
            g = todo.pop()
            waiting = state.waiting[g]
            while True:
                m = waiting.get(state.expect_local[g])
                if m is None or not self._ready(state, m):
                    break
                self._deliver(state, m)
                for atom, _ in m.stamps:
                    if atom in state.expect_atom:
                        todo.extend(
                            other for other in state.mine if other != g and atom in stamping[other]
                        )

    def _deliver(self, state: _Epoch, m: Sequenced) -> None:
        del state.waiting[m.group][m.local]
        self._pending -= 1
        state.expect_local[m.group] = m.local + 1
        for atom, number in m.stamps:
            if atom in state.expect_atom:
                state.expect_atom[atom] = number + 1
        self._own.pop((m.origin, m.origin_seq), None)
        event = Event(source=m.origin, seq=m.origin_seq, ts=m.local, payload=m.payload)
        self._deliveries.append(Delivery(event=event, tag=DeliveryTag.IN_ORDER))
        self._counts["delivered"] += 1

    # -- changes and the end of an epoch ----------------------------------------

    def _on_change(self, sender: ProcessId, m: Change) -> str | None:
        if sender != self.coordinator:
            return "not-coordinator"
        if m.epoch != self._latest + 1:
            return "bad-epoch"
        if self._check_ops(m.ops) is not None:
            return "bad-change"
        graph = self._changed_graph(m.ops)
        if graph is None:
            return "bad-change"
        self._install(m, graph)
        return None

    def _check_ops(self, ops: Sequence[ChangeOp]) -> str | None:
        """Why ``ops`` do not apply to the latest graph, or None."""
        groups = set(self._graph.groups)
        dead = set(self._dead)
        for op in ops:
            if type(op) is AddGroup:
                if not 0 <= op.group < _U32_LIMIT or op.group in groups:
                    return f"group {op.group} exists or is out of range"
                if not op.members or not op.members <= self.nodes or op.members & dead:
                    return f"group {op.group}: members must be live nodes of the deployment"
                groups.add(op.group)
            elif type(op) is RemoveGroup:
                if op.group not in groups:
                    return f"no group {op.group}"
                groups.discard(op.group)
            elif type(op) is ReplaceHost:
                live = self.nodes - dead
                if op.crashed not in live or op.replacement not in live:
                    return "the crashed node and its replacement must be live nodes"
                if op.crashed in (op.replacement, self.coordinator):
                    return "a node cannot replace itself, nor the coordinator be replaced"
                dead.add(op.crashed)
            else:
                return f"unknown operation {op!r}"
        return None

    def _changed_graph(self, ops: Sequence[ChangeOp]) -> SequencingGraph | None:
        """A copy of the latest graph with ``ops`` applied, or None if the
        graph refuses one (the graph may have rules of its own, such as
        members that must be sites of its latencies); the graph itself is
        left as it was."""
        graph = copy.deepcopy(self._graph)
        try:
            for op in ops:
                if type(op) is AddGroup:
                    graph.add_group(op.group, op.members)
                elif type(op) is RemoveGroup:
                    graph.remove_group(op.group)
        except (ValueError, KeyError):
            return None
        return graph

    def _install(self, change: Change, graph: SequencingGraph) -> None:
        self._graph = graph
        for op in change.ops:
            if type(op) is ReplaceHost:
                self._dead.add(op.crashed)
                self._heard.pop(op.crashed, None)
                for node, to in self._moved.items():
                    if to == op.crashed:
                        self._moved[node] = op.replacement
                self._moved[op.crashed] = op.replacement
        old = self._epochs.get(self._latest)
        layout = Layout.of(change.epoch, self._graph, self._moved)
        self._epochs[change.epoch] = _Epoch(self.pid, layout)
        self._latest = change.epoch
        if old is not None:
            # Rule 6: this node publishes no more in the old epoch.
            for g in sorted(old.mine):
                ingress = old.layout.ingress[g]
                marker = EpochEnd(old.layout.epoch, g, PUBLISHER, 0)
                if ingress == self.pid:
                    self._on_publisher_end(old, self.pid, g)
                else:
                    self._send(ingress, marker)
        early, self._early = self._early, []
        for sender, m in early:
            self.receive(sender, m)
        self._settle()

    def _on_epoch_end(self, state: _Epoch, sender: ProcessId, m: EpochEnd) -> str | None:
        layout = state.layout
        if m.group not in layout.groups:
            return "unknown-group"
        if m.stage == PUBLISHER:
            if m.hop != 0:
                return "bad-hop"
            if m.group not in state.local_next:
                return "not-ingress"
            if sender not in layout.groups[m.group]:
                return "not-a-member"
            if m.group not in state.awaiting or sender in state.marked[m.group]:
                return "repeated"
            self._on_publisher_end(state, sender, m.group)
        else:
            fault = self._check_hop(state, sender, m.group, m.hop)
            if fault is not None:
                return fault
            if m.hop == len(layout.routes[m.group]):
                state.ended.add(m.group)  # every message of the group's epoch is here
            else:
                self._pass_marker(state, m.group, m.hop)
        self._settle()
        return None

    def _on_publisher_end(self, state: _Epoch, sender: ProcessId, group: int) -> None:
        state.marked[group].add(sender)
        state.awaiting[group].discard(sender)

    def _pass_marker(self, state: _Epoch, group: int, hop: int) -> None:
        """The route marker of ``group`` reaches this node at ``hop``: pass
        the atoms played here, send it on (behind everything sent before)."""
        layout = state.layout
        route = layout.routes[group]
        state.open_runs.discard((group, hop))
        while hop < len(route) and layout.hosts[route[hop]] == self.pid:
            hop += 1
        if hop < len(route):
            self._send(layout.hosts[route[hop]], EpochEnd(layout.epoch, group, ROUTE, hop))
            return
        for member in sorted(layout.groups[group]):
            if member == self.pid:
                state.ended.add(group)
            else:
                self._send(member, EpochEnd(layout.epoch, group, ROUTE, hop))

    def _settle(self) -> None:
        """Do what the epochs' markers and the crashed nodes now allow: close
        ingress groups, pass markers a crashed node will not send, end the
        receiver's epochs, forget the epochs this node is done with."""
        dead = self._dead
        for e in sorted(self._epochs):
            if e >= self._latest:
                break
            state = self._epochs[e]
            layout = state.layout
            for g in sorted(state.awaiting):
                if not state.awaiting[g] - dead:
                    del state.awaiting[g]
                    self._pass_marker(state, g, 0)
            if dead:
                for g, k in sorted(state.open_runs):
                    if layout.previous(g, k) in dead:
                        self._pass_marker(state, g, k)
                for g in state.mine - state.ended:
                    if layout.distributor(g) in dead:
                        state.ended.add(g)
        while self._delivering < self._latest:
            state = self._epochs[self._delivering]
            if not state.mine <= state.ended:
                break
            self._end_epoch(state)
            self._delivering += 1
            following = self._epochs[self._delivering]
            for g in sorted(following.mine):
                self._deliver_ready(following, g)
        for e in [e for e in self._epochs if e < self._delivering]:
            state = self._epochs[e]
            if not state.awaiting and not state.open_runs:
                del self._epochs[e]

    def _end_epoch(self, state: _Epoch) -> None:
        """Deliver what is left of the epoch at this receiver (rule 7), in an
        order that respects every group-local number and every stamp of an
        atom whose overlap holds this node, the gaps left out: Kahn's order
        over those chains, the smallest (group, local) first among the
        messages free at once. O(P log P) for P messages left."""
        left = [m for waiting in state.waiting.values() for m in waiting.values()]
        chains: dict[tuple[int, int], list[tuple[int, Sequenced]]] = {}
        for m in left:
            chains.setdefault((0, m.group), []).append((m.local, m))
            for atom, number in m.stamps:
                if atom in state.expect_atom:
                    chains.setdefault((1, atom), []).append((number, m))
        after: dict[tuple[int, int], list[Sequenced]] = {}
        before = {(m.group, m.local): 0 for m in left}
        for chain in chains.values():
            chain.sort(key=lambda item: item[0])
            for (_, first), (_, second) in itertools.pairwise(chain):
                after.setdefault((first.group, first.local), []).append(second)
                before[second.group, second.local] += 1
        free = [(key, m) for m in left if before[key := (m.group, m.local)] == 0]
        heapq.heapify(free)
        while free:
            key, m = heapq.heappop(free)
            self._deliver(state, m)
            for n in after.get(key, ()):
                before[n.group, n.local] -= 1
                if before[n.group, n.local] == 0:
                    heapq.heappush(free, ((n.group, n.local), n))
        stuck = sum(len(waiting) for waiting in state.waiting.values())
        if stuck:  # a circle of stamps: never expected (C2)
            self._counts["abandoned"] += stuck
            self._pending -= stuck
            for waiting in state.waiting.values():
                waiting.clear()
        epoch = state.layout.epoch
        lost = [eid for eid, e in self._own.items() if e == epoch]
        for eid in lost:
            del self._own[eid]
        self._counts["lost"] += len(lost)

    # -- outputs ------------------------------------------------------------

    def messages_to_send(self) -> list[tuple[ProcessId, Message]]:
        """``(destination, message)`` pairs; drains."""
        out, self._outbox = self._outbox, []
        return out

    def next_delivery(self) -> Delivery | None:
        return self._deliveries.popleft() if self._deliveries else None

    def deliveries(self) -> Iterator[Delivery]:
        while self._deliveries:
            yield self._deliveries.popleft()

    def get_timer(self) -> float:
        """When :meth:`handle_timer` is next due: never without a detector."""
        after = self.suspect_after
        if after is None:
            return float("inf")
        if self.pid != self.coordinator:
            return self._next_beat
        return min((t + after for t in self._heard.values()), default=float("inf"))

    def handle_timer(self, now: float) -> None:
        """The detector (rule 7): a heartbeat to the coordinator when one is
        due; at the coordinator, every node silent for ``suspect_after`` is
        declared crashed, one change each."""
        after = self.suspect_after
        if after is None:
            return
        if self.pid != self.coordinator:
            if now >= self._next_beat:
                self._outbox.append((self.coordinator, Alive(self._latest)))
                self._next_beat = now + after / 3
            return
        for node in sorted(self._heard):
            if now - self._heard[node] >= after:
                del self._heard[node]
                self.replace_crashed(node)

    def statistics(self) -> AtomsStatistics:
        c = self._counts
        return AtomsStatistics(
            broadcasts=c["broadcasts"],
            delivered=c["delivered"],
            sequenced=c["sequenced"],
            stamped=c["stamped"],
            forwarded=c["forwarded"],
            pending=self._pending + len(self._early),
            rejected=dict(self._rejected),
            epoch=self._latest,
            delivering_epoch=self._delivering,
            lost=c["lost"],
            dropped=c["dropped"],
            abandoned=c["abandoned"],
        )
