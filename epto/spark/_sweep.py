"""Evaluation sweeps on Spark: independent seeded simulations run on the
executors, locally or on a cluster, the results gathered in the driver.

Each configuration is a dictionary of :class:`~epto.transports.simulation.SimulationSpec`
fields (or whatever the given function takes); every one is a pure function
of its fields (the seed among them), so the results are the same wherever
and in whatever order they run. A user who outgrows one machine changes the
master URL and nothing else.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Runner = Callable[[dict[str, Any]], dict[str, Any]]


def simulate(config: dict[str, Any]) -> dict[str, Any]:
    """Run one simulation (``config``: ``SimulationSpec`` fields) and return its
    JSON summary, with the CPU seconds it took."""
    from epto.transports.simulation import SimulationSpec, run_simulation

    cpu = time.process_time()
    result = run_simulation(SimulationSpec(**config))
    summary: dict[str, Any] = result.summary()
    summary["cpu_seconds"] = time.process_time() - cpu
    return summary


def grid(axes: Mapping[str, Sequence[Any]], **fixed: Any) -> list[dict[str, Any]]:
    """Every combination of ``axes`` (field -> values), with ``fixed`` fields."""
    names = sorted(axes)
    return [
        dict(fixed, **dict(zip(names, values, strict=True)))
        for values in itertools.product(*(axes[n] for n in names))
    ]


def sweep(
    configs: Iterable[dict[str, Any]],
    *,
    runner: Runner = simulate,
    master: str | None = None,
    spark: Any = None,
    slices: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``runner(config)`` for every configuration on Spark; the results in
    the order of ``configs``. ``runner`` must be importable or picklable by
    Spark (a module-level function). ``spark`` (a session) wins over
    ``master``; neither: a local session (:func:`epto.spark.session`).
    ``slices``: Spark tasks (default: one per configuration, at most four per
    core), each running its configurations one after the other."""
    items = list(enumerate(configs))
    if not items:
        return []
    if spark is None:
        from ._session import session

        spark = session(master, app_name="epto-sweep")
    context = spark.sparkContext
    count = slices or min(len(items), 4 * max(1, context.defaultParallelism))
    rdd = context.parallelize(items, count)
    pairs = rdd.map(lambda item: (item[0], runner(item[1]))).collect()
    return [result for _, result in sorted(pairs, key=lambda pair: pair[0])]


def load_configs(text: str) -> list[dict[str, Any]]:
    """Configurations from JSON: a list of objects, or ``{"axes": {...},
    "fixed": {...}}`` for a grid."""
    value = json.loads(text)
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    if isinstance(value, dict) and isinstance(value.get("axes"), dict):
        return grid(value["axes"], **value.get("fixed", {}))
    raise ValueError('give a list of configurations or {"axes": {...}, "fixed": {...}}')
