"""Delay plans of optimistic delivery (seed 001) in a token-ring process:
latency probes, reports to the coordinator, the coordinator's plans, and
the delays a member applies.

Rules:

* **Latencies.** Every ``probe_interval`` a member sends each other member a
  ``Probe`` with its clock; the peer echoes it at once. The one-way estimate
  is half the median of the last ``probe_window`` round trips (paths are
  taken as symmetric), rounded to ``resolution``.
* **Reports.** Members report their latency row and send rate
  (``Latencies``, with the plan they hold) to the coordinator, the first
  core member, after every configuration change and whenever a latency or
  the rate drifted (``drift``, ``drift_floor``), checked every
  ``report_interval``.
* **Plans.** The coordinator plans when every pair of members has a latency
  (a missing direction is taken from the other one) and the view differs
  from the last plan's, or a latency or rate drifted since it (at most once
  per ``replan_interval``); it sends each member its row of delays
  (``Delays``), and sends it again to a member whose report shows another
  plan. Rates below 1% of the highest count as 1% of it.
* **Taking a plan.** A member takes a plan only from the current
  coordinator, in ``(instance, epoch)`` order, for a configuration it has
  reached, with every delay in ``[0, max_delay]`` and for members of its
  view; anything else is refused and counted. Until then its delays are zero.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import attrs

from .._event import ProcessId
from ..optimistic import OptimisticConfig, Plan, fast_seto, optimal, seto_steady_state
from ._membership import Role
from ._messages import Delays, Latencies, Probe
from ._outbox import Outbox
from ._shared import Shared

_MIN_RATE_SHARE = 0.01
"""A sender's rate in a plan is at least this share of the highest rate (a
sender that is quiet now still gets delays that suit it when it speaks)."""


@attrs.frozen(kw_only=True, slots=True)
class _Planned:
    members: tuple[ProcessId, ...]
    latencies: dict[tuple[ProcessId, ProcessId], float]
    rates: dict[ProcessId, float]


class DelayPlans:
    """Latency probes, reports and plans for one process; :attr:`delays` is
    what its optimistic deliveries add to each sender's messages."""

    __slots__ = (
        "_cfg",
        "_epoch",
        "_out",
        "_plan_key",
        "_planned",
        "_planned_at",
        "_probe_at",
        "_rate_marks",
        "_report_at",
        "_reported",
        "_rows",
        "_s",
        "_samples",
        "_sent_rows",
        "delays",
        "plans",
        "plans_made",
    )

    def __init__(self, shared: Shared, out: Outbox, cfg: OptimisticConfig, now: float) -> None:
        self._s = shared
        self._out = out
        self._cfg = cfg
        self.delays: dict[ProcessId, float] = {}
        """The delay added to each sender's messages (absent: zero)."""
        self._samples: dict[ProcessId, deque[float]] = {}
        self._probe_at = now
        self._report_at = now + cfg.report_interval
        self._reported: tuple[int, dict[ProcessId, float], float] | None = None
        """(instance, row, rate) of the last report."""
        self._rate_marks: deque[tuple[float, int]] = deque([(now, shared.counts.broadcasts)])
        """(time, broadcasts so far) at each report, over ``rate_window``."""
        self._plan_key = (0, 0)
        """(instance, epoch) of the plan in use; epochs start at 1."""
        # The coordinator's side.
        self._rows: dict[ProcessId, tuple[dict[ProcessId, float], float]] = {}
        self._planned: _Planned | None = None
        self._planned_at = -math.inf
        self._epoch = 0
        self._sent_rows: dict[ProcessId, Delays] = {}
        """The latest plan's row of each member (sent again to a member whose
        report shows it does not hold it: it was in another configuration)."""
        self.plans = 0
        self.plans_made = 0

    def _active(self) -> bool:
        return self._s.role in (Role.CORE, Role.EXTERNAL)

    def timer(self) -> float:
        if not self._active():
            return math.inf
        return min(self._probe_at, self._report_at)

    def tick(self, now: float) -> None:
        """Probes and reports that are due."""
        if not self._active():
            return
        cfg = self._cfg
        if now >= self._probe_at:
            self._probe_at = now + cfg.probe_interval
            self._forget_departed()
            self._out.send_all(Probe(stamp=now))
        if now >= self._report_at:
            self._report_at = now + cfg.report_interval
            self._maybe_report(now)
        elif self._reported is None or self._reported[0] != self._s.ring.instance:
            self._maybe_report(now)

    def on_probe(self, sender: ProcessId, msg: Probe, now: float) -> None:
        if not msg.echo:
            self._out.send(sender, Probe(stamp=msg.stamp, echo=True))
            return
        rtt = now - msg.stamp
        if not 0.0 <= rtt <= 2 * self._cfg.max_delay:
            self._s.reject("bad-probe")
            return
        samples = self._samples.get(sender)
        if samples is None:
            samples = self._samples[sender] = deque(maxlen=self._cfg.probe_window)
        samples.append(rtt / 2)

    def latency_row(self) -> dict[ProcessId, float]:
        """One-way estimates to the peers that answered probes."""
        res = self._cfg.resolution
        return {
            p: round(round(statistics.median(samples) / res) * res, 12)
            for p, samples in self._samples.items()
            if samples
        }

    def _forget_departed(self) -> None:
        members = set(self._s.ring.members)
        for p in [p for p in self._samples if p not in members]:
            del self._samples[p]
        for p in [p for p in self._rows if p not in members]:
            del self._rows[p]
        for p in [p for p in self._sent_rows if p not in members]:
            del self._sent_rows[p]

    def _rate(self, now: float) -> float:
        """This member's send rate over the last ``rate_window`` seconds (over
        the time since it started, before that): over one report interval,
        Poisson traffic of a few messages per second looks like a drift at
        every report, and every drift is a plan that mispredicts what is in
        flight while it reaches the members."""
        marks = self._rate_marks
        marks.append((now, self._s.counts.broadcasts))
        horizon = now - self._cfg.rate_window
        while len(marks) > 2 and marks[1][0] <= horizon:
            marks.popleft()
        (first, sent), (last, total) = marks[0], marks[-1]
        return (total - sent) / (last - first) if last > first else 0.0

    def _maybe_report(self, now: float) -> None:
        s = self._s
        instance = s.ring.instance
        row = self.latency_row()
        rate = self._rate(now)
        last = self._reported
        unchanged = last is not None and last[0] == instance and not self._row_drifted(last[1], row)
        if unchanged and last is not None and not _drifted(last[2], rate, 5 * self._cfg.drift, 0.0):
            return
        self._reported = (instance, row, rate)
        report = Latencies(
            instance=instance, plan=self._plan_key, rate=rate, row=tuple(sorted(row.items()))
        )
        coordinator = s.ring.core[0] if s.ring.core else None
        if coordinator == s.pid:
            self.on_latencies(s.pid, report, now)
        elif coordinator is not None:
            self._out.send(coordinator, report)

    def _row_drifted(self, old: dict[ProcessId, float], new: dict[ProcessId, float]) -> bool:
        if old.keys() != new.keys():
            return True
        cfg = self._cfg
        return any(_drifted(old[p], new[p], cfg.drift, cfg.drift_floor) for p in new)

    # -- plans (the coordinator) -------------------------------------------------

    def on_latencies(self, sender: ProcessId, msg: Latencies, now: float) -> None:
        s = self._s
        if not s.ring.core or s.ring.core[0] != s.pid:
            s.reject("not-coordinator")
            return
        members = set(s.ring.members)
        row = {p: v for p, v in msg.row if p in members and p != sender}
        self._rows[sender] = (row, msg.rate)
        self._maybe_plan(now)
        latest = self._sent_rows.get(sender)
        if latest is not None and msg.plan != (latest.instance, latest.epoch):
            if sender == s.pid:
                self.on_delays(sender, latest, now)
            else:
                self._out.send(sender, latest)

    def _maybe_plan(self, now: float) -> None:
        s = self._s
        members = s.ring.members
        latencies: dict[tuple[ProcessId, ProcessId], float] = {}
        rows = self._rows
        for r in members:
            for p in members:
                if p == r:
                    continue
                w = rows.get(r, ({}, 0.0))[0].get(p)
                if w is None:
                    w = rows.get(p, ({}, 0.0))[0].get(r)
                if w is None:
                    return  # not every pair measured yet
                latencies[(r, p)] = w
        rates = {p: rows[p][1] if p in rows else 0.0 for p in members}
        last = self._planned
        if last is not None and last.members == members:
            if now - self._planned_at < self._cfg.replan_interval:
                return
            if not self._plan_drifted(last, latencies, rates, now):
                return
        self._planned = _Planned(members=members, latencies=latencies, rates=rates)
        self._planned_at = now
        self._epoch += 1
        self.plans_made += 1
        delays = self._plan(members, latencies, rates)
        instance = s.ring.instance
        for i, r in enumerate(members):
            msg = Delays(
                instance=instance,
                epoch=self._epoch,
                row=tuple((p, delays[i][j]) for j, p in enumerate(members)),
            )
            self._sent_rows[r] = msg
            if r == s.pid:
                self.on_delays(r, msg, now)
            else:
                self._out.send(r, msg)

    def _plan_drifted(
        self,
        last: _Planned,
        latencies: dict[tuple[ProcessId, ProcessId], float],
        rates: dict[ProcessId, float],
        now: float,
    ) -> bool:
        """Whether a latency drifted since ``last``, or (at most once per
        ``rate_window``: a new plan mispredicts what is in flight, and rates
        only weigh the average) a rate."""
        cfg = self._cfg
        old = last.latencies
        if any(_drifted(old[k], v, cfg.drift, cfg.drift_floor) for k, v in latencies.items()):
            return True
        if now - self._planned_at < cfg.rate_window:
            return False
        return any(_drifted(last.rates[p], v, 5 * cfg.drift, 0.0) for p, v in rates.items())

    def _plan(
        self,
        members: tuple[ProcessId, ...],
        latencies: dict[tuple[ProcessId, ProcessId], float],
        rates: dict[ProcessId, float],
    ) -> list[list[float]]:
        n = len(members)
        planner = self._cfg.planner
        if planner == "none" or n == 1:
            return [[0.0] * n for _ in range(n)]
        w = [[0.0 if r == p else latencies[(r, p)] for p in members] for r in members]
        top = max(rates.values())
        weights = None if top <= 0 else [max(rates[p], top * _MIN_RATE_SHARE) for p in members]
        plan: Plan
        if planner == "optimal":
            plan = optimal(w, rates=weights)
        elif planner == "fast-seto":
            plan = fast_seto(w, rates=weights)
        else:
            plan = seto_steady_state(w, members.index(self._s.pid), rates=weights)
        return [list(row) for row in plan.delays]

    def on_delays(self, sender: ProcessId, msg: Delays, now: float) -> None:
        s = self._s
        if not s.ring.core or sender != s.ring.core[0]:
            s.reject("not-coordinator")
            return
        key = (msg.instance, msg.epoch)
        if msg.instance > s.ring.instance or key <= self._plan_key:
            s.reject("stale-plan")
            return
        members = set(s.ring.members)
        limit = self._cfg.max_delay
        if any(p not in members or not 0.0 <= d <= limit for p, d in msg.row):
            s.reject("bad-delays")
            return
        self._plan_key = key
        self.delays = dict(msg.row)
        self.plans += 1

    # -- reading -----------------------------------------------------------------


def _drifted(old: float, new: float, relative: float, floor: float) -> bool:
    change = abs(new - old)
    return change > floor and change > relative * abs(old)
