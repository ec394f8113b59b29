"""The retransmission timeout of the fast repairs (a token sent again, a
fetch sent to another member), from the round trips a member measures.

As TCP derives its retransmission timeout (RFC 6298, *Computing TCP's
Retransmission Timer*): ``srtt`` and ``rttvar`` follow the samples, and the
timeout is ``srtt + 4 * rttvar``. The samples are the round trips a member
already makes: a token passed and acknowledged, timed from the send of the
copy the acknowledgement names (``Token.copy``, as TCP's timestamps time a
segment sent twice), and a fetch answered by the member it was sent to
without a second fetch to it meanwhile (Karn's rule: an answer to a request
sent twice is no sample). Before any sample the timeout is ``initial``.
"""

from __future__ import annotations

import math

from .._event import ProcessId


class RoundTrips:
    """One member's estimate of its round trips to the others."""

    __slots__ = ("initial", "rttvar", "samples", "srtt")

    def __init__(self, initial: float) -> None:
        self.initial = initial
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.samples = 0

    def sample(self, rtt: float) -> None:
        """Take a round trip (ignored unless finite and not negative)."""
        if not (rtt >= 0 and math.isfinite(rtt)):
            return
        self.samples += 1
        if self.srtt is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def rto(self) -> float:
        """The retransmission timeout: ``srtt + 4 * rttvar``, or ``initial``."""
        if self.srtt is None:
            return self.initial
        return self.srtt + 4 * self.rttvar


class PeerRoundTrips:
    """One :class:`RoundTrips` per member measured, so that a slow link's
    timeout is not a fast one's (the token always goes to the same
    successor). Bounded: at most ``limit()`` peers are kept (the members of
    the view); when full, the table starts afresh."""

    __slots__ = ("_initial", "_peers")

    def __init__(self, initial: float) -> None:
        self._initial = initial
        self._peers: dict[ProcessId, RoundTrips] = {}

    def sample(self, peer: ProcessId, rtt: float, limit: int) -> None:
        trips = self._peers.get(peer)
        if trips is None:
            if len(self._peers) >= max(1, limit):
                self._peers = {}
            trips = self._peers[peer] = RoundTrips(self._initial)
        trips.sample(rtt)

    def rto(self, peer: ProcessId) -> float:
        """The retransmission timeout towards ``peer`` (``initial`` if unmeasured)."""
        trips = self._peers.get(peer)
        return self._initial if trips is None else trips.rto()

    def srtt(self, peer: ProcessId) -> float | None:
        """The smoothed round trip to ``peer``; None before its first sample."""
        trips = self._peers.get(peer)
        return None if trips is None else trips.srtt

    def __len__(self) -> int:
        return len(self._peers)
