"""Run a fixed set of seeded ``epto simulate`` configurations and write (or
compare) their JSON summaries, byte for byte, without the wall-clock field.

The summaries in ``tests/golden/simulate/`` were produced by the code before
the endpoint refactoring; ``tests/test_simulate_golden.py`` reruns every
configuration and compares. Regenerate only for an intended behaviour change::

    python scripts/simulate_golden.py --write
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "simulate"

CONFIGURATIONS: dict[str, list[str]] = {
    "epto-global": ["-n", "30", "--rounds", "12", "--clock", "global", "--seed", "11"],
    "epto-logical": ["-n", "30", "--rounds", "12", "--clock", "logical", "--seed", "12"],
    "epto-loss-tagged-paper": [
        "-n",
        "25",
        "--rounds",
        "12",
        "--loss",
        "0.1",
        "--tagged",
        "--ordering",
        "paper",
        "--fanout",
        "3",
        "--ttl",
        "6",
        "--seed",
        "13",
    ],
    "epto-partition": [
        "-n",
        "30",
        "--rounds",
        "15",
        "--partition",
        "0.3",
        "--partition-start",
        "3",
        "--partition-rounds",
        "4",
        "--seed",
        "14",
    ],
    "cyclon-churn": [
        "-n",
        "40",
        "--rounds",
        "12",
        "--pss",
        "cyclon",
        "--view-size",
        "12",
        "--churn",
        "0.02",
        "--pss-warmup",
        "20",
        "--seed",
        "15",
    ],
    "token-ring-loss": [
        "--mode",
        "token-ring",
        "-n",
        "5",
        "--events",
        "60",
        "--loss",
        "0.05",
        "--seed",
        "16",
    ],
    "token-ring-partition": [
        "--mode",
        "token-ring",
        "-n",
        "7",
        "--rounds",
        "25",
        "--events",
        "50",
        "--partition",
        "0.3",
        "--partition-start",
        "5",
        "--partition-rounds",
        "6",
        "--seed",
        "17",
    ],
    "token-ring-k2-uniform": [
        "--mode",
        "token-ring",
        "-n",
        "6",
        "--events",
        "40",
        "--k",
        "2",
        "--latency",
        "uniform",
        "--latency-min",
        "5",
        "--latency-max",
        "60",
        "--seed",
        "18",
    ],
}


def summary(name: str) -> str:
    """The JSON summary of one configuration, without ``wall_seconds``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        args = [sys.executable, "-m", "epto.cli", "simulate", "--quiet", "--json", str(out)]
        subprocess.run([*args, *CONFIGURATIONS[name]], check=False, capture_output=True)
        data = json.loads(out.read_text())
    data.pop("wall_seconds", None)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the golden files")
    args = parser.parse_args()
    differ = 0
    for name in CONFIGURATIONS:
        text = summary(name)
        path = GOLDEN / f"{name}.json"
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        elif path.read_text() != text:
            differ += 1
            print(f"DIFFERS {name}")
        else:
            print(f"same    {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
