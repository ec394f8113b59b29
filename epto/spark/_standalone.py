"""A Spark standalone cluster on 127.0.0.1 (a master and workers) from the pyspark package.

For trying cluster mode on one machine (executors in their own JVMs, Python
workers started by them, nothing inherited from the driver's environment):
the tests use it, and so does ``scripts/evaluation.py --standalone N`` to run
the EpTO paper's evaluation sweep on a real master without a cluster at hand.
A production cluster is started by its operators; pass its URL instead.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(
        f"{log.name}: no {pattern!r} within {seconds:g} s:\n{log.read_text()[-3000:]}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


@contextmanager
def standalone_cluster(
    work: str | os.PathLike[str], *, workers: int = 1, cores: int = 1, memory: str = "1g"
) -> Iterator[str]:
    """Start a Spark master and ``workers`` workers (``cores`` cores and
    ``memory`` each) on 127.0.0.1; yields the master URL (``spark://...``)
    and stops them all on exit. Logs and work directories go under ``work``.

    Waits up to 90 s for each daemon to start (a ``RuntimeError`` with the end
    of its log otherwise). Pass the URL to :func:`epto.spark.session`; the
    executors do not see the caller's virtual environment, and the session's
    settings bring this ``epto`` to them (:func:`worker_settings`).
    """
    work = Path(work)
    if workers < 1 or cores < 1:
        raise ValueError(f"workers and cores must be positive, got {workers} and {cores}")
    from epto.transports._ports import free_ports

    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    # The daemons (and so the executors they start) see no virtual environment
    # and no PYTHONPATH: the application's settings must bring epto to them.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYSPARK_PYTHON", "VIRTUAL_ENV", "PYSPARK_DRIVER_PYTHON"}
    }
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_WORKER_DIR": str(work / "work"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    master_port, master_ui, *worker_ports = free_ports(2 + 2 * workers, socket.SOCK_STREAM)
    url = f"spark://127.0.0.1:{master_port}"
    procs: list[subprocess.Popen[bytes]] = []
    work.mkdir(parents=True, exist_ok=True)

    def start(name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(spark_class), *args], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        return proc, log

    try:
        master, log = start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(master_port)),
                *("--webui-port", str(master_ui)),
            ],
        )
        _wait_for(log, r"I have been elected leader", master, 90)
        for i in range(workers):
            port, ui = worker_ports[2 * i : 2 * i + 2]
            worker, wlog = start(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
                    *("--cores", str(cores), "--memory", memory),
                    *("--work-dir", str(work / f"work-{i}")),
                ],
            )
            _wait_for(wlog, r"Successfully registered with master", worker, 90)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)
