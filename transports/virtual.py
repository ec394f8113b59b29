"""The virtual-time network: seeded discrete-event simulation of EpTO and
token-ring groups.

See ``docs/simulation.md``. Public names::

    from epto.transports.virtual import Cluster, Simulation, PlanetLabLatency
"""

from ._calendar import SimulationStalled as SimulationStalled
from ._cluster import Cluster as Cluster
from ._cluster import DeliveryRecorder as DeliveryRecorder
from ._latency import ConstantLatency as ConstantLatency
from ._latency import LatencyModel as LatencyModel
from ._latency import PlanetLabLatency as PlanetLabLatency
from ._latency import UniformLatency as UniformLatency
from ._network import NetworkStatistics as NetworkStatistics
from ._ring_cluster import TokenRingCluster as TokenRingCluster
from ._spec import SimulationSpec as SimulationSpec
from ._virtual import Simulation as Simulation
from ._virtual import SimulationObserver as SimulationObserver
from ._virtual_run import SimulationResult as SimulationResult
from ._virtual_run import run_simulation as run_simulation
