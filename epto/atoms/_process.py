"""One node of the sequencing-atoms engine, sans-IO: it plays the atoms it
hosts, assigns group-local numbers for the groups whose ingress it is, and
delivers the messages of its groups in the stamped order.

Rules (seed 003, restated in docs/atoms.md):

1. **Ingress.** A member publishes to its group's ingress
   (:meth:`SequencingGraph.ingress`), which gives the message the next
   group-local number. The number is assigned there and not by the sender:
   two senders' messages reach the first atom in one order only once they
   share a link.
2. **Route.** The message then passes the group's route in order
   (:meth:`SequencingGraph.route`); an atom whose ``served`` groups include
   the message's group gives it its next number (a *stamp*), the others only
   forward it. Atoms on one host are passed without a message; between
   hosts, links are reliable and FIFO, so the order an atom saw is the order
   the next one sees.
3. **Distribution.** After the last atom (or at the ingress, for a group with
   no double overlap) the message goes to every member of the group.
4. **Delivery.** A member ``r`` delivers a message of group ``G`` once its
   group-local number is the next one of ``G`` and, for every stamp
   ``(A, n)`` with ``r`` in ``A``'s overlap, ``n`` is the next number of
   ``A`` at ``r``; it then advances those counters. Any two members that
   both deliver two messages ordered by a common atom deliver them in that
   atom's order; two messages without a common atom have at most one common
   receiver. The graph's C2 (a polytree) is what keeps receivers from
   waiting on each other in a circle.
5. **Hostile input** is refused and counted, never raised: a message for an
   unknown group, to a node that is not the place its hop names, from a
   node that is not the previous place of the route, with stamps that are
   not those of the atoms passed, a publication from a non-member or a
   repeated one, beyond ``max_pending`` buffered messages.

The graph is the same at every node (built from the same membership);
changing it while messages are in flight is not supported yet.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import attrs

from .._errors import LocalProtocolError
from .._event import Delivery, DeliveryTag, Event, EventId, ProcessId
from ._graph import SequencingGraph
from ._messages import Publish, Sequenced

Message = Publish | Sequenced


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


class AtomsProcess:
    """One node; see the module docstring for the rules.

    Inputs: :meth:`publish`, :meth:`receive`. Outputs, pulled:
    :meth:`messages_to_send`, :meth:`next_delivery`. No timer: every decision
    is taken on an input.
    """

    def __init__(
        self, pid: ProcessId, graph: SequencingGraph, *, max_pending: int = 100_000
    ) -> None:
        self.pid = pid
        self.graph = graph
        self.max_pending = max_pending
        self._my_groups = frozenset(g for g, members in graph.groups.items() if pid in members)
        self._routes = {g: graph.route(g) for g in graph.groups}
        self._stamping = {g: frozenset(graph.stamping(g)) for g in graph.groups}
        self._atoms_here = {a.id for a in graph.atoms.values() if a.host == pid}
        # What this node orders: the next number of each hosted atom and of
        # each group whose ingress it is.
        self._atom_next = dict.fromkeys(self._atoms_here, 0)
        self._local_next = {g: 0 for g in graph.groups if graph.ingress(g) == pid}
        self._published: dict[ProcessId, int] = {}
        # What it delivers: the next group-local number of its groups, the
        # next stamp of the atoms whose overlap holds it, and what waits.
        self._expect_local = dict.fromkeys(self._my_groups, 0)
        self._expect_atom = {a.id: 0 for a in graph.atoms.values() if pid in a.overlap}
        self._waiting: dict[int, dict[int, Sequenced]] = {g: {} for g in self._my_groups}
        self._pending = 0
        self._own_seq = 0
        self._turn = 0
        self.last_group: int | None = None
        """The group of this node's latest publication."""
        self._outbox: list[tuple[ProcessId, Message]] = []
        self._deliveries: deque[Delivery] = deque()
        self._counts = dict.fromkeys(
            ("broadcasts", "delivered", "sequenced", "stamped", "forwarded"), 0
        )
        self._rejected: dict[str, int] = {}

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float = 0.0) -> EventId:
        """Publish ``payload`` to this node's groups in turn (ascending ids):
        the engine-neutral input of simulations and workloads. Applications
        name the group with :meth:`publish`."""
        mine = sorted(self._my_groups)
        if not mine:
            raise LocalProtocolError(f"node {self.pid} is in no group")
        group = mine[self._turn % len(mine)]
        self._turn += 1
        return self.publish(group, payload)

    def publish(self, group: int, payload: bytes) -> EventId:
        """Send ``payload`` to the members of ``group`` (this node must be one)."""
        if group not in self._my_groups:
            raise LocalProtocolError(f"node {self.pid} is not a member of group {group}")
        self.last_group = group
        seq = self._own_seq
        self._own_seq += 1
        self._counts["broadcasts"] += 1
        message = Publish(group, seq, payload)
        ingress = self.graph.ingress(group)
        if ingress == self.pid:
            self._on_publish(self.pid, message)
        else:
            self._outbox.append((ingress, message))
        return (self.pid, seq)

    def receive(self, sender: ProcessId, message: object, now: float = 0.0) -> None:
        """One message from ``sender`` (over a reliable FIFO link); ``now`` is
        not used (no decision here depends on time)."""
        if type(message) is Publish:
            fault = self._check_publish(sender, message)
            if fault is None:
                self._on_publish(sender, message)
        elif type(message) is Sequenced:
            fault = self._check_sequenced(sender, message)
            if fault is None:
                if message.hop == len(self._routes[message.group]):
                    self._arrive(message)  # past its last atom: a delivery
                else:
                    self._on_route(message)
        else:
            fault = "unknown-message"
        if fault is not None:
            self._rejected[fault] = self._rejected.get(fault, 0) + 1

    # -- checks -------------------------------------------------------------

    def _check_publish(self, sender: ProcessId, m: Publish) -> str | None:
        members = self.graph.groups.get(m.group)
        if members is None:
            return "unknown-group"
        if m.group not in self._local_next:
            return "not-ingress"
        if sender not in members:
            return "not-a-member"
        last = self._published.get(sender)
        if last is not None and m.origin_seq <= last:
            return "repeated"
        return None

    def _check_sequenced(self, sender: ProcessId, m: Sequenced) -> str | None:
        route = self._routes.get(m.group)
        if route is None:
            return "unknown-group"
        if not (1 <= m.hop <= len(route) or m.hop == len(route) == 0):
            return "bad-hop"
        # Where it comes from: the host of the atom before its hop, or the
        # ingress for a group without atoms.
        hop = m.hop
        previous = self.graph.atoms[route[hop - 1]].host if hop else self.graph.ingress(m.group)
        if sender != previous:
            return "bad-source"
        if m.hop < len(route):
            if route[m.hop] not in self._atoms_here:
                return "not-here"
        elif m.group not in self._my_groups:
            return "not-a-member"
        stamping = self._stamping[m.group]
        passed = tuple(a for a in route[: m.hop] if a in stamping)
        if tuple(atom for atom, _ in m.stamps) != passed:
            return "bad-stamps"
        if m.hop == len(route) and self._pending >= self.max_pending:
            return "buffer-full"
        return None

    # -- ordering -----------------------------------------------------------

    def _on_publish(self, origin: ProcessId, m: Publish) -> None:
        self._published[origin] = m.origin_seq
        local = self._local_next[m.group]
        self._local_next[m.group] = local + 1
        self._counts["sequenced"] += 1
        self._on_route(Sequenced(m.group, local, origin, m.origin_seq, 0, (), m.payload))

    def _on_route(self, m: Sequenced) -> None:
        """Pass ``m`` through the atoms of its route hosted here, then send it on."""
        route = self._routes[m.group]
        stamping = self._stamping[m.group]
        atoms = self.graph.atoms
        hop = m.hop
        stamps = m.stamps
        while hop < len(route) and atoms[route[hop]].host == self.pid:
            atom = route[hop]
            if atom in stamping:
                stamps = (*stamps, (atom, self._atom_next[atom]))
                self._atom_next[atom] += 1
                self._counts["stamped"] += 1
            hop += 1
        m = attrs.evolve(m, hop=hop, stamps=stamps)
        if hop < len(route):
            self._counts["forwarded"] += 1
            self._outbox.append((atoms[route[hop]].host, m))
            return
        for member in sorted(self.graph.groups[m.group]):
            if member == self.pid:
                self._arrive(m)
            else:
                self._counts["forwarded"] += 1
                self._outbox.append((member, m))

    def _arrive(self, m: Sequenced) -> None:
        waiting = self._waiting[m.group]
        if m.local < self._expect_local[m.group] or m.local in waiting:
            self._rejected["repeated"] = self._rejected.get("repeated", 0) + 1
            return
        waiting[m.local] = m
        self._pending += 1
        self._deliver_ready(m.group)

    def _ready(self, m: Sequenced) -> bool:
        expect = self._expect_atom
        return all(expect.get(atom, number) == number for atom, number in m.stamps)

    def _deliver_ready(self, group: int) -> None:
        """Deliver what is ready, starting from ``group``; a delivery may make
        the head of another group ready (it advanced an atom's counter)."""
        todo = [group]
        while todo:
            g = todo.pop()
            waiting = self._waiting[g]
            while True:
                m = waiting.get(self._expect_local[g])
                if m is None or not self._ready(m):
                    break
                del waiting[m.local]
                self._pending -= 1
                self._expect_local[g] = m.local + 1
                for atom, _ in m.stamps:
                    if atom in self._expect_atom:
                        self._expect_atom[atom] += 1
                        todo.extend(
                            other
                            for other in self._my_groups
                            if other != g and atom in self._stamping[other]
                        )
                event = Event(source=m.origin, seq=m.origin_seq, ts=m.local, payload=m.payload)
                self._deliveries.append(Delivery(event=event, tag=DeliveryTag.IN_ORDER))
                self._counts["delivered"] += 1

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
        return float("inf")

    def handle_timer(self, now: float) -> None:
        pass

    @property
    def groups(self) -> frozenset[int]:
        """The groups this node is a member of."""
        return self._my_groups

    def statistics(self) -> AtomsStatistics:
        c = self._counts
        return AtomsStatistics(
            broadcasts=c["broadcasts"],
            delivered=c["delivered"],
            sequenced=c["sequenced"],
            stamped=c["stamped"],
            forwarded=c["forwarded"],
            pending=self._pending,
            rejected=dict(self._rejected),
        )
