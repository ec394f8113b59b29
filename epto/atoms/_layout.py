"""One version of the sequencing graph as a node uses it (internal): the
groups, routes, stamping atoms and hosts of an epoch, frozen when the epoch
is installed, so that the graph object can go on changing while the epoch's
messages drain. Hosts and ingresses are the graph's, except that a crashed
node's part is played by its replacement (``moved``)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._graph import SequencingGraph


@attrs.frozen(kw_only=True)
class Layout:
    """Epoch ``epoch``'s graph; see the module docstring."""

    epoch: int
    groups: Mapping[int, frozenset[int]]
    routes: Mapping[int, tuple[int, ...]]
    stamping: Mapping[int, frozenset[int]]
    hosts: Mapping[int, int]
    """atom -> the node that plays it in this epoch."""
    overlaps: Mapping[int, frozenset[int]]
    ingress: Mapping[int, int]

    @classmethod
    def of(cls, epoch: int, graph: SequencingGraph, moved: Mapping[int, int]) -> Layout:
        hosts = {a.id: moved.get(a.host, a.host) for a in graph.atoms.values()}
        groups = dict(graph.groups)
        routes = {g: graph.route(g) for g in groups}
        ingress = {}
        for g in groups:
            node = graph.ingress(g)
            ingress[g] = moved.get(node, node)
        return cls(
            epoch=epoch,
            groups=groups,
            routes=routes,
            stamping={g: frozenset(graph.stamping(g)) for g in groups},
            hosts=hosts,
            overlaps={a.id: a.overlap for a in graph.atoms.values()},
            ingress=ingress,
        )

    def previous(self, group: int, hop: int) -> int:
        """The node that sends a message of ``group`` to the place of ``hop``
        (the host of the atom before it, or the ingress)."""
        return self.hosts[self.routes[group][hop - 1]] if hop else self.ingress[group]

    def runs(self, group: int, pid: int) -> list[int]:
        """The hops at which ``pid`` takes a message of ``group`` from another
        node: the first atom of each run of atoms ``pid`` plays on the route,
        the ingress's own run (hop 0) left out."""
        route = self.routes[group]
        hosts = self.hosts
        return [
            k for k in range(1, len(route)) if hosts[route[k]] == pid and hosts[route[k - 1]] != pid
        ]

    def distributor(self, group: int) -> int:
        """The node that sends ``group``'s messages to the members."""
        route = self.routes[group]
        return self.hosts[route[-1]] if route else self.ingress[group]
