from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epto
from epto.cli import main
from epto.params import derive_parameters, fanout_for, ttl_for


@pytest.mark.parametrize(
    ("n", "clock", "fanout", "ttl"),
    [(100, "global", 17, 20), (100, "logical", 17, 40), (10_000, "global", 23, 40)],
)
def test_reference_values(n: int, clock: str, fanout: int, ttl: int) -> None:
    p = derive_parameters(n, clock=clock)  # type: ignore[arg-type]
    assert (p.fanout, p.ttl) == (fanout, ttl)


def test_fanout_is_capped_for_small_groups() -> None:
    for n in range(2, 16):
        k, raw = fanout_for(n)
        assert k == n - 1
        assert raw > n - 1
    assert fanout_for(1000)[0] < 999


def test_churn_and_loss_raise_the_fanout_as_lemma_7_says() -> None:
    base = fanout_for(1000)[1]
    _, raw = fanout_for(1000, churn=100, loss=0.1)
    assert raw == pytest.approx(base * 1000 / 900 / 0.9)


def test_drift_and_bounded_latency_raise_the_ttl() -> None:
    assert ttl_for(100, clock="global", drift=1.5) == 30
    assert ttl_for(100, clock="global", bounded_latency=True) == 21
    assert ttl_for(100, clock="logical", drift=1.01, bounded_latency=True) == 42


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 1}, "n must be"),
        ({"n": 100, "c": 1.0}, "c must be"),
        ({"n": 100, "loss": 1.0}, "loss must be"),
        ({"n": 100, "churn": 100}, "churn"),
        ({"n": 100, "drift": 0.5}, "drift must be"),
    ],
)
def test_impossible_inputs_are_named(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(epto.ConfigurationError, match=field):
        derive_parameters(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=200, derandomize=True)
@given(n=st.integers(2, 10**6), c=st.floats(1.01, 5), loss=st.floats(0, 0.5))
def test_parameters_are_monotone_and_in_range(n: int, c: float, loss: float) -> None:
    p = derive_parameters(n, c=c, loss=loss, clock="global")
    assert 1 <= p.fanout <= n - 1
    assert p.ttl >= math.ceil((c + 1) * math.log2(n) - 1e-9)
    assert derive_parameters(n, c=c, loss=loss, clock="logical").ttl == 2 * p.ttl


def test_config_for_group_uses_the_lemmas() -> None:
    config = epto.Config.for_group(100, clock="global", round_interval=0.05)
    assert (config.fanout, config.ttl, config.round_interval) == (17, 20, 0.05)
    assert epto.Config.for_group(100).ttl == 40  # the library's default clock is logical


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--n", "100", "--clock", "global", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["fanout"], data["ttl"]) == (17, 20)
    assert main(["params", "--n", "100", "--json"]) == 0  # the default clock is logical
    assert json.loads(capsys.readouterr().out)["ttl"] == 40


def test_cli_rejects_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--n", "1"]) != 0
    assert "n must be an integer of at least 2" in capsys.readouterr().err
