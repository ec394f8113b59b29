"""The virtual-time network: seeded discrete-event simulation of EpTO and
token-ring groups.

See ``docs/simulation.md``. Public names::

    from epto.transports.simulation import Cluster, Simulation, PlanetLabLatency
"""

from ._calendar import SimulationStalled as SimulationStalled
from ._cluster import Cluster as Cluster
from ._cluster import DeliveryRecorder as DeliveryRecorder
from ._experiment import SimulationResult as SimulationResult
from ._experiment import run_simulation as run_simulation
from ._latency import ConstantLatency as ConstantLatency
from ._latency import LatencyModel as LatencyModel
from ._latency import PlanetLabLatency as PlanetLabLatency
from ._latency import UniformLatency as UniformLatency
from ._network import NetworkStatistics as NetworkStatistics
from ._ring_cluster import TokenRingCluster as TokenRingCluster
from ._simulation import Simulation as Simulation
from ._simulation import SimulationObserver as SimulationObserver
from ._spec import SimulationSpec as SimulationSpec
