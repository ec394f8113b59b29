"""One set of defaults: the
library's ``Config`` and ``NodeConfig``, ``derive_parameters``, and the
``epto node``, ``epto params`` and ``epto simulate`` commands run with the
same round interval, clock and safety constant, so a group started with no
options has the fanout and TTL ``epto params`` prints."""

from __future__ import annotations

import inspect
import json

import pytest
from epto.transports import NodeConfig
from epto.transports.simulation import SimulationSpec

import epto
from epto._defaults import DEFAULT_C, DEFAULT_CLOCK, DEFAULT_ROUND_INTERVAL
from epto.cli import build_parser, main
from epto.params import derive_parameters, ttl_for

NODE_ARGV = ["node", "--id=1", "--peer=2=127.0.0.1:9", "--peer=3=127.0.0.1:10"]


def test_the_shared_defaults_are_the_documented_ones() -> None:
    assert (DEFAULT_CLOCK, DEFAULT_ROUND_INTERVAL, DEFAULT_C) == ("logical", 0.125, 2.0)


def test_the_library_uses_them() -> None:
    config = epto.Config(fanout=1, ttl=1)
    assert (config.round_interval, config.clock) == (DEFAULT_ROUND_INTERVAL, DEFAULT_CLOCK)
    node = NodeConfig(pid=1)
    assert (node.round_interval, node.clock) == (DEFAULT_ROUND_INTERVAL, DEFAULT_CLOCK)
    assert derive_parameters(100).clock == DEFAULT_CLOCK
    assert derive_parameters(100).c == DEFAULT_C
    assert ttl_for(100) == derive_parameters(100).ttl
    for function in (epto.Config.for_group, derive_parameters, ttl_for):
        signature = inspect.signature(function)
        assert signature.parameters["clock"].default == DEFAULT_CLOCK, function
        assert signature.parameters["c"].default == DEFAULT_C, function
    assert epto.CyclonConfig().shuffle_period == DEFAULT_ROUND_INTERVAL
    spec = SimulationSpec()
    assert (spec.clock, spec.c) == (DEFAULT_CLOCK, DEFAULT_C)
    assert spec.round_interval == DEFAULT_ROUND_INTERVAL * 1000  # ticks of a millisecond


def test_the_commands_use_them() -> None:
    parser = build_parser()
    node = parser.parse_args(NODE_ARGV)
    assert (node.round_interval, node.clock) == (DEFAULT_ROUND_INTERVAL, DEFAULT_CLOCK)
    params = parser.parse_args(["params", "--n", "3"])
    assert (params.clock, params.c) == (DEFAULT_CLOCK, DEFAULT_C)
    simulate = parser.parse_args(["simulate"])
    assert (simulate.clock, simulate.c) == (DEFAULT_CLOCK, DEFAULT_C)
    assert simulate.round_length == DEFAULT_ROUND_INTERVAL * 1000


@pytest.mark.parametrize("n", [3, 10, 100])
def test_a_node_without_options_has_what_epto_params_prints(
    n: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from epto.cli._node import _config

    peers = [f"--peer={pid}=127.0.0.1:{9000 + pid}" for pid in range(2, n + 1)]
    config = _config(build_parser().parse_args(["node", "--id=1", *peers]))
    protocol = config.protocol_config()
    assert main(["params", "--n", str(n), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (protocol.fanout, protocol.ttl) == (printed["fanout"], printed["ttl"])
    assert (protocol.clock, protocol.round_interval) == (printed["clock"], DEFAULT_ROUND_INTERVAL)
    assert protocol == epto.Config.for_group(n)
