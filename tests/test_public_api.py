"""The public surface, pinned name by name (in the manner of trio's
``trio/_tests/test_exports.py``).

Each public module declares ``__all__``; what ``dir()`` shows without a leading
underscore is exactly ``__all__`` (submodules aside: they are listed in
PUBLIC_SUBMODULES), and ``from module import *`` gives the same names. A change
to the public surface therefore changes this file too, on purpose.
"""

from __future__ import annotations

import importlib
import types

import pytest

EXPORTS: dict[str, frozenset[str]] = {
    "epto": frozenset(
        {
            # the engines' configuration (the engines: epto.epidemic, epto.tokenring, epto.atoms)
            "ClockKind",
            "Config",
            "CyclonConfig",
            "Limits",
            "OrderingKind",
            "Parameters",
            "TokenRingConfig",
            "derive_parameters",
            # events and deliveries
            "Delivery",
            "DeliveryTag",
            "Event",
            "EventId",
            "ProcessId",
            # errors
            "ConfigurationError",
            "EptoError",
            "LocalProtocolError",
            "MemberRunningError",
            # a node's configuration and the state-machine layer
            "NodeConfig",
            "StateMachine",
            "replicated",
            "RemoteProtocolError",
            "SupersededError",
            # group key and signatures
            "EventSigner",
            "GroupKey",
            "SignatureVerifier",
            "VerifierStatistics",
        }
    ),
    "epto.epidemic": frozenset(
        {
            "ClockKind",
            "Config",
            "Cyclon",
            "CyclonConfig",
            "CyclonStatistics",
            "FullView",
            "Membership",
            "Node",
            "NodeStatistics",
            "OrderingKind",
            "Parameters",
            "PeerDescriptor",
            "PeerSampler",
            "Process",
            "ProcessStatistics",
            "derive_parameters",
        }
    ),
    "epto.wire": frozenset(
        {
            "HEADER_SIZE",
            "KIND_BALL",
            "KIND_LEAVE",
            "KIND_SHUFFLE_REPLY",
            "KIND_SHUFFLE_REQUEST",
            "Ball",
            "BallEntry",
            "Frame",
            "FrameCodec",
            "FrameKind",
            "FrameRegistry",
            "GroupSealer",
            "LayeredBall",
            "Leave",
            "NodeMessage",
            "PeerMessage",
            "Reader",
            "ReplayWindow",
            "Sealer",
            "ShuffleReply",
            "ShuffleRequest",
            "default_registry",
            "signed_message",
        }
    ),
    "epto.tokenring": frozenset(
        {
            "AUTO_TOKEN_RING_MAX_GROUP",
            "OptimisticStatistics",
            "RingConfig",
            "Role",
            "TOKEN_RING_KINDS",
            "TokenRingConfig",
            "TokenRingProcess",
            "TokenRingStatistics",
            "TokenState",
            "choose_mode",
            "decode_durable",
            "encode_durable",
            "splitting_registry",
            "token_ring_registry",
        }
    ),
    "epto.log": frozenset(
        {
            "DeliveryLogWriter",
            "DeliveryLogs",
            "LogCorruptError",
            "LogExtent",
            "LogGapError",
            "LogRecord",
            "LogTailLostError",
            "SimulationLogger",
            "check_logs",
            "iter_raw",
            "last_ordered_ts",
            "list_nodes",
            "list_segments",
            "log_bounds",
            "log_extent",
            "micros",
            "node_directory",
            "read_broadcasts",
            "read_log",
            "segment_ranges",
            "write_broadcasts",
        }
    ),
    "epto.spark": frozenset(
        {
            "Gateway",
            "GatewayStatistics",
            "SinkRow",
            "SinkRows",
            "SinkStatistics",
            "analyze",
            "grid",
            "jvm_jar",
            "register",
            "session",
            "simulate",
            "standalone_cluster",
            "sweep",
            "worker_settings",
        }
    ),
    "epto.check": frozenset(
        {
            "CheckReport",
            "HistoryOp",
            "IntegrityViolation",
            "LinearizabilityVerdict",
            "OrderViolation",
            "PairwiseReport",
            "PairwiseViolation",
            "check",
            "check_linearizable",
            "check_pairwise",
            "find_cycles",
        }
    ),
    "epto.keys": frozenset(
        {
            "generate_group_key",
            "generate_signing_key",
            "load_group_key",
            "load_public_key",
            "load_roster",
            "load_signing_key",
            "roster_from_public_files",
            "save_group_key",
            "save_roster",
            "save_signing_key",
        }
    ),
    "epto.params": frozenset({"Parameters", "derive_parameters", "fanout_for", "ttl_for"}),
    "epto.stability": frozenset({"StabilityEstimate", "estimate"}),
    "epto.endpoint": frozenset(
        {
            "Address",
            "AddressBook",
            "AtomsAdapter",
            "AtomsEndpoint",
            "AtomsEndpointStatistics",
            "AtomsHandle",
            "Eager",
            "EngineHandle",
            "Endpoint",
            "EndpointStatistics",
            "EptoAdapter",
            "EptoEndpoint",
            "EptoEndpointStatistics",
            "EptoHandle",
            "Leaving",
            "Mode",
            "NodeConfig",
            "Ordering",
            "OPENER_MAX",
            "OverflowPolicy",
            "Stoppable",
            "StreamEndpoint",
            "TokenRingAdapter",
            "TokenRingEndpoint",
            "TokenRingEndpointStatistics",
            "TokenRingHandle",
            "Transmit",
            "ViewAware",
            "join_host_port",
            "ordering_of",
            "parse_host_port",
        }
    ),
    "epto.atoms": frozenset(
        {
            "Atom",
            "AtomsConfig",
            "AtomsProcess",
            "AtomsStatistics",
            "GraphChange",
            "Latencies",
            "SequencingGraph",
            "check_graph",
            "zipf_memberships",
        }
    ),
    "epto.optimistic": frozenset(
        {"OptimisticConfig", "Plan", "SetoDelays", "fast_seto", "optimal", "seto_steady_state"}
    ),
    "epto.rsm": frozenset(
        {
            "EMPTY_DIGEST",
            "Applied",
            "AuditVerdicts",
            "CommandCodec",
            "CommandFailed",
            "JsonCodec",
            "OrderKey",
            "Replica",
            "Snapshot",
            "SnapshotStore",
            "StateMachine",
            "StoredSnapshot",
            "chain",
            "order_key",
            "replicated",
        }
    ),
    "epto.transports": frozenset(
        {
            "DeliveryOverflowError",
            "Mode",
            "NodeConfig",
            "OverflowPolicy",
            "TransportStatistics",
            "open_node",
        }
    ),
    "epto.transports.simulation": frozenset(
        {
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
        }
    ),
}

PUBLIC_SUBMODULES: dict[str, frozenset[str]] = {
    "epto": frozenset(
        {
            "apps",
            "atoms",
            "benchmarks",
            "check",
            "cli",
            "endpoint",
            "epidemic",
            "keys",
            "log",
            "optimistic",
            "params",
            "rsm",
            "services",
            "spark",
            "stability",
            "tokenring",
            "transports",
            "wire",
        }
    ),
    "epto.transports": frozenset(
        {
            "blocking",
            "memory",
            "simulation",
            "trio_atoms",
            "trio_node",
            "trio_tcp",
            "trio_udp",
            "zmq_node",
        }
    ),
    "epto.services": frozenset({"trio_editor", "trio_rsm", "zmq_rsm"}),
}

NODE_MODULES: dict[str, frozenset[str]] = {
    # The driver modules hold their node's code, so their namespace shows what
    # they import too; their __all__ (what ``import *`` gives) is pinned.
    "epto.transports.memory": frozenset({"MemoryHub", "MemoryNode"}),
    "epto.transports.trio_udp": frozenset({"UdpNode"}),
    "epto.transports.trio_atoms": frozenset({"AtomsNode"}),
    "epto.services.zmq_rsm": frozenset({"CommandTimeoutError", "ZmqReplica"}),
    "epto.services.trio_rsm": frozenset(
        {
            "CommandFailedError",
            "CommandTimeoutError",
            "ReplicaConfig",
            "ReplicaNotReadyError",
            "ReplicaStatus",
            "ReplicatedNode",
            "ResultUnavailableError",
        }
    ),
    "epto.services.trio_editor": frozenset({"EditorConfig", "EditorServer", "editor_token"}),
    "epto.transports.trio_tcp": frozenset(
        {
            "MemberExcludedError",
            "TcpNode",
            "TcpNodeConfig",
            "TcpNodeStatistics",
            "TokenRingNode",
            "TokenRingNodeStatistics",
        }
    ),
    "epto.transports.trio_node": frozenset(
        {
            "GroupNode",
            "GroupStatistics",
            "MemberExcludedError",
            "open_node",
        }
    ),
    "epto.transports.zmq_node": frozenset({"ZmqNode"}),
    "epto.transports.blocking": frozenset({"BlockingNode"}),
}

NEEDS = {"epto.spark": "pyspark"}


def _import(name: str) -> types.ModuleType:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_all_is_pinned(name: str) -> None:
    module = _import(name)
    declared = module.__all__
    assert len(declared) == len(set(declared)), f"{name}.__all__ repeats a name"
    assert set(declared) == EXPORTS[name]


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_dir_shows_exactly_all(name: str) -> None:
    module = _import(name)
    visible = {n for n in dir(module) if not n.startswith("_")}
    submodules = {n for n in visible if isinstance(getattr(module, n), types.ModuleType)}
    assert submodules <= PUBLIC_SUBMODULES.get(name, frozenset()), (
        f"{name} shows modules that are not public submodules: {sorted(submodules)}"
    )
    assert visible - submodules == set(module.__all__)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_star_import_gives_all(name: str) -> None:
    _import(name)
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(namespace) - {"__builtins__"} == EXPORTS[name]


def test_the_application_surface_and_the_wire_do_not_overlap() -> None:
    assert not EXPORTS["epto"] & EXPORTS["epto.wire"]


def test_public_submodules_exist() -> None:
    for parent, names in PUBLIC_SUBMODULES.items():
        for name in names:
            if f"{parent}.{name}" in NEEDS:
                continue
            importlib.import_module(f"{parent}.{name}")


@pytest.mark.parametrize("name", sorted(NODE_MODULES))
def test_node_modules_all_is_pinned(name: str) -> None:
    module = importlib.import_module(name)
    assert set(module.__all__) == NODE_MODULES[name]
    for exported in module.__all__:
        assert not isinstance(getattr(module, exported), types.ModuleType)
