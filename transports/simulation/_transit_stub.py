"""A transit-stub topology in the manner of GT-ITM (Zegura, Calvert and
Bhattacharjee, "How to model an internetwork", INFOCOM 1996), the kind of
topology the sequencing-atoms paper (Lumezanu, Spring and Bhattacharjee)
evaluates on: 10,000 routers, propagation delay only, end hosts in clusters.

**Routers.** ``transit_domains`` transit domains of ``transit_routers``
routers each; every transit router has ``stubs_per_transit`` stub domains of
``stub_routers`` routers (the defaults, 10 x 10 x (1 + 3 x 33), give 10,000
routers). Routers lie in a plane whose unit is one millisecond of
propagation: transit domain centres uniform in a ``world`` x ``world``
square, a domain's routers within ``transit_spread`` of its centre, a stub
domain's centre within ``stub_offset`` of its transit router and its routers
within ``stub_spread`` of that centre. Each domain is a connected random
graph: every router is linked to the nearest router drawn before it (a
spanning tree), and every other pair with probability ``transit_edges`` or
``stub_edges``. Transit domains are linked by a random connected graph of
domains (a spanning tree plus each other pair with probability
``domain_edges``), each domain link joining a random router of each; each
stub domain hangs from its transit router by one link to a random router of
the stub (its gateway). A link's delay is its length.

**Hosts.** ``hosts`` end hosts in clusters of ``cluster_size`` (the last one
may be smaller); each cluster lives in a stub domain drawn at random (one
cluster per stub domain), each host attached to a random router of it by an
access link of ``access`` ms. So hosts of a cluster are close, and clusters
are spread over the topology.

**Latency.** The one-way latency between two hosts is the shortest path
(both access links, then the routers): inside one stub domain, a path of
that domain; otherwise up to the gateway, over the transit routers and down
(a stub domain is a leaf: its only way out is its gateway, so this is the
shortest path of the whole graph). Symmetric, fixed per pair (propagation
only, no queueing). The paper's parameters beyond the router count are not
stated: the defaults here give one-way latencies of a few ms inside a
cluster and up to about two hundred ms across the world.

Only the stub domains that hold a cluster are drawn: a stub domain is a
leaf, so the others carry no path between hosts (``routers`` still counts
them). Deterministic from ``seed``; the network's random generator is not
used.
"""

from __future__ import annotations

import heapq
import math
import random

from epto import ConfigurationError


def _positive_int(name: str, value: int) -> int:
    if not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return value


def _probability(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0 <= value <= 1):
        raise ConfigurationError(f"{name} must be in [0, 1], got {value!r}")
    return float(value)


def _length(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigurationError(f"{name} must be a non-negative finite number, got {value!r}")
    return float(value)


Point = tuple[float, float]
Graph = list[list[tuple[int, float]]]


def _near(rng: random.Random, centre: Point, spread: float) -> Point:
    return (
        centre[0] + spread * (rng.random() - 0.5),
        centre[1] + spread * (rng.random() - 0.5),
    )


def _distance(a: Point, b: Point) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


def _random_graph(rng: random.Random, points: list[Point], p: float) -> Graph:
    """A connected random graph: a nearest-earlier spanning tree, then each
    other pair with probability ``p``; weights are lengths."""
    n = len(points)
    graph: Graph = [[] for _ in range(n)]
    linked: set[tuple[int, int]] = set()

    def link(u: int, v: int) -> None:
        if u == v or (min(u, v), max(u, v)) in linked:
            return
        linked.add((min(u, v), max(u, v)))
        w = _distance(points[u], points[v])
        graph[u].append((v, w))
        graph[v].append((u, w))

    for v in range(1, n):
        link(v, min(range(v), key=lambda u: _distance(points[u], points[v])))
    for u in range(n):
        for v in range(u + 1, n):
            if rng.random() < p:
                link(u, v)
    return graph


def _dijkstra(graph: Graph, source: int) -> list[float]:
    dist = [math.inf] * len(graph)
    dist[source] = 0.0
    heap = [(0.0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in graph[u]:
            nd = d + w
            if nd < dist[v]:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


class TransitStubLatency:
    """One-way latencies between ``hosts`` end hosts of a transit-stub
    topology (module docstring); process ``p`` is host ``p mod hosts``."""

    __slots__ = ("_matrix", "hosts", "routers")

    def __init__(
        self,
        hosts: int,
        *,
        seed: int = 1,
        transit_domains: int = 10,
        transit_routers: int = 10,
        stubs_per_transit: int = 3,
        stub_routers: int = 33,
        cluster_size: int = 8,
        world: float = 100.0,
        transit_spread: float = 20.0,
        stub_offset: float = 10.0,
        stub_spread: float = 4.0,
        transit_edges: float = 0.5,
        stub_edges: float = 0.1,
        domain_edges: float = 0.3,
        access: float = 1.0,
    ) -> None:
        self.hosts = _positive_int("hosts", hosts)
        t_domains = _positive_int("transit_domains", transit_domains)
        t_routers = _positive_int("transit_routers", transit_routers)
        stubs_each = _positive_int("stubs_per_transit", stubs_per_transit)
        s_routers = _positive_int("stub_routers", stub_routers)
        size = _positive_int("cluster_size", cluster_size)
        for name, value in (
            ("world", world),
            ("transit_spread", transit_spread),
            ("stub_offset", stub_offset),
            ("stub_spread", stub_spread),
            ("access", access),
        ):
            _length(name, value)
        for name, value in (
            ("transit_edges", transit_edges),
            ("stub_edges", stub_edges),
            ("domain_edges", domain_edges),
        ):
            _probability(name, value)
        clusters = -(-self.hosts // size)
        stubs = t_domains * t_routers * stubs_each
        if clusters > stubs:
            raise ConfigurationError(
                f"{clusters} clusters of hosts need as many stub domains, there are {stubs}"
            )
        self.routers = t_domains * t_routers * (1 + stubs_each * s_routers)
        rng = random.Random(f"transit-stub/{seed}")

        # Transit routers: one graph for all of them (domain graphs + domain links).
        centres = [(world * rng.random(), world * rng.random()) for _ in range(t_domains)]
        points = [_near(rng, c, transit_spread) for c in centres for _ in range(t_routers)]
        transit: Graph = [[] for _ in points]
        for d in range(t_domains):
            base = d * t_routers
            inner = _random_graph(rng, points[base : base + t_routers], transit_edges)
            for u, around in enumerate(inner):
                transit[base + u].extend((base + v, w) for v, w in around)
        domain_links = [
            (d, min(range(d), key=lambda e: _distance(centres[d], centres[e])))
            for d in range(1, t_domains)
        ]
        domain_links += [
            (a, b)
            for a in range(t_domains)
            for b in range(a + 1, t_domains)
            if rng.random() < domain_edges
        ]
        for a, b in domain_links:
            u = a * t_routers + rng.randrange(t_routers)
            v = b * t_routers + rng.randrange(t_routers)
            w = _distance(points[u], points[v])
            transit[u].append((v, w))
            transit[v].append((u, w))

        # Clusters: each in its own stub domain (stub s hangs from transit router s // stubs_each).
        homes = rng.sample(range(stubs), clusters)
        # Per host: its transit router, the way up to it, its stub domain, its
        # router there and the distances from that router inside the stub.
        placed: list[tuple[int, float, int, int, list[float]]] = []
        for c, stub in enumerate(homes):
            owner = stub // stubs_each
            centre = _near(rng, points[owner], 2 * stub_offset)
            stub_points = [_near(rng, centre, stub_spread) for _ in range(s_routers)]
            graph = _random_graph(rng, stub_points, stub_edges)
            gateway = rng.randrange(s_routers)
            uplink = _distance(points[owner], stub_points[gateway])
            from_gateway = _dijkstra(graph, gateway)
            for _ in range(min(size, self.hosts - c * size)):
                router = rng.randrange(s_routers)
                inside = _dijkstra(graph, router)
                placed.append((owner, uplink + from_gateway[router], stub, router, inside))
        sources = sorted({owner for owner, *_ in placed})
        across = {t: _dijkstra(transit, t) for t in sources}
        n = self.hosts
        matrix = [0.0] * (n * n)
        for i, (t1, up1, s1, _, inside1) in enumerate(placed):
            for j, (t2, up2, s2, r2, _) in enumerate(placed):
                if i == j:
                    continue
                path = inside1[r2] if s1 == s2 else up1 + across[t1][t2] + up2
                matrix[i * n + j] = 2 * access + path
        self._matrix = tuple(matrix)

    @property
    def maximum(self) -> float:
        return max(self._matrix)

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        n = self.hosts
        return self._matrix[(src % n) * n + dst % n]

    def matrix(self) -> list[list[float]]:
        """The hosts' one-way latencies, ``matrix[src][dst]`` (ms)."""
        n = self.hosts
        return [list(self._matrix[i * n : (i + 1) * n]) for i in range(n)]

    def __repr__(self) -> str:
        return f"TransitStubLatency(hosts={self.hosts!r}, routers={self.routers!r})"
