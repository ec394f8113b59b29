"""The virtual-time network: a seeded discrete-event simulation of EpTO and
token-ring groups (``docs/simulation.md``). Public names::

    from epto.transports.simulation import Cluster, Simulation, PlanetLabLatency

The modules, bottom up (no import circle: ``tests/test_simulation_layout.py``):

* ``_calendar.py``: the calendar queue, its item kinds, versioned timers,
  :class:`SimulationStalled`;
* ``_latency.py``: latency models; ``_transit_stub.py``: the transit-stub
  topology's;
* ``_network.py``: latency, loss and partitions for datagrams and reliable
  FIFO links;
* ``_spec.py``: :class:`SimulationSpec`, the value that defines a run;
* ``_members.py``: :class:`SimulationObserver`, the :class:`Engine`
  interface, the ``SimulationPort`` through which an engine drives the
  simulation it is bound to (no engine reads the simulation's private
  attributes), and the members (joins, crashes, churn, broadcasts, outputs);
* ``_engines.py``: ``EptoEngine`` and ``TokenRingEngine``: what is
  simulation-specific per engine (making a process, link model, settling,
  verdicts, figures);
* ``_atoms_engine.py``: ``AtomsEngine``, the same for sequencing atoms;
* ``_simulation.py``: :class:`Simulation`, the run loop;
* ``_cluster.py``: :class:`Cluster` and :class:`DeliveryRecorder`;
* ``_ring_cluster.py``: :class:`TokenRingCluster`, the token-ring tests' harness;
* ``_experiment.py``: :func:`run_simulation` and :class:`SimulationResult`.

Every simulated process runs behind the same message-level adapter a real
node's endpoint holds (``epto.endpoint.EptoAdapter``, ``TokenRingAdapter``,
``AtomsAdapter``; ``Simulation.endpoints``, the engines themselves in
``Simulation.processes``): the payload limit (``Simulation(limits=)``),
holes (``count_holes``) and ``flushed`` are the endpoints' own code.

Outside ``_engines.py`` nothing switches on the engine, except:

* ``SimulationSpec.validate`` refuses ``mode="token-ring"`` with Cyclon, and
  ``mode="atoms"`` with loss, churn or a partition: the spec is a value below
  the engines (they are built from it), and ``epto simulate`` validates a
  spec before running it;
* :class:`TokenRingCluster` is a token-ring harness (its type narrowing);
* the run loop's round timer (``TIMER``) reads the jitter's round length
  from ``proc.process.config``: only engines that use that kind (EpTO) get there.
"""

from ._calendar import SimulationStalled as SimulationStalled
from ._cluster import Cluster as Cluster
from ._cluster import DeliveryRecorder as DeliveryRecorder
from ._experiment import SimulationResult as SimulationResult
from ._experiment import run_simulation as run_simulation
from ._latency import ConstantLatency as ConstantLatency
from ._latency import LatencyModel as LatencyModel
from ._latency import LinkLatency as LinkLatency
from ._latency import PlanetLabLatency as PlanetLabLatency
from ._latency import UniformLatency as UniformLatency
from ._members import SimulationObserver as SimulationObserver
from ._network import NetworkStatistics as NetworkStatistics
from ._ring_cluster import TokenRingCluster as TokenRingCluster
from ._simulation import Simulation as Simulation
from ._spec import SimulationSpec as SimulationSpec
from ._transit_stub import TransitStubLatency as TransitStubLatency
from ._wire import WireProcess as WireProcess

__all__ = [
    "Cluster",
    "ConstantLatency",
    "DeliveryRecorder",
    "LatencyModel",
    "LinkLatency",
    "NetworkStatistics",
    "PlanetLabLatency",
    "Simulation",
    "SimulationObserver",
    "SimulationResult",
    "SimulationSpec",
    "SimulationStalled",
    "TokenRingCluster",
    "TransitStubLatency",
    "UniformLatency",
    "WireProcess",
    "run_simulation",
]
