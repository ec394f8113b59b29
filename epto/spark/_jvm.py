"""The JVM reader (``format("epto-jvm")``): built from its Java sources on first use.

The sources live in ``epto/spark/jvm/`` and are shipped with the package. A
jar is compiled with ``javac --release 17`` against the jars of the installed
PySpark and kept in a cache directory (``$EPTO_CACHE_DIR``, else
``$XDG_CACHE_HOME/epto``, else ``~/.cache/epto``) under a name that hashes
the sources and the PySpark version, so a change of either builds a new jar
and a cached one is never stale. Without ``javac`` (a JRE only) there is no
jar and sessions read with the Python source only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .._errors import EptoError

SOURCES = Path(__file__).parent / "jvm"
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "epto.spark.jvm.EptoLogSource"
FORMAT = "epto-jvm"


def _pyspark() -> tuple[str, Path]:
    import pyspark

    return pyspark.__version__, Path(pyspark.__file__).parent / "jars"


def cache_directory() -> Path:
    base = os.environ.get("EPTO_CACHE_DIR")
    if base:
        return Path(base) / "spark-jvm"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "epto" / "spark-jvm"


def javac() -> str | None:
    """``$JAVA_HOME/bin/javac``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "javac"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("javac")


def jar_path() -> Path:
    """Where the jar of these sources for this PySpark is (or would be) cached."""
    version, _ = _pyspark()
    digest = hashlib.sha256(version.encode())
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return cache_directory() / f"epto-spark-jvm-{digest.hexdigest()[:16]}.jar"


def build(*, compiler: str | None = None) -> Path | None:
    """The reader's jar, compiled now if it is not cached; ``None`` without ``javac``.

    Raises :class:`EptoError` when ``javac`` fails (a defect, never expected).
    Concurrent builds are safe: each compiles in its own directory and the jar
    is moved into place in one rename.
    """
    target = jar_path()
    if target.is_file():
        return target
    compiler = compiler or javac()
    if compiler is None:
        return None
    _, jars = _pyspark()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        command = [
            compiler,
            "--release",
            "17",
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            str(jars / "*"),
            "-d",
            str(classes),
            *sorted(str(p) for p in SOURCES.glob("*.java")),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EptoError(f"javac failed to build the epto-jvm reader:\n{done.stderr}")
        jar = Path(tmp) / "epto-spark-jvm.jar"
        with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            out.writestr(SERVICE, PROVIDER + "\n")
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        os.replace(jar, target)
    return target


def jvm_jar() -> str | None:
    """The path of the ``epto-jvm`` reader's jar, built on first use, or ``None``
    when it cannot be built here (no ``javac``). Pass it to a session that
    :func:`epto.spark.session` does not build: ``spark.jars`` or ``--jars``."""
    path = build()
    return None if path is None else str(path)


def reader_error(exc: BaseException) -> EptoError | None:
    """The ``epto-jvm`` reader's error inside a failed Spark call (a
    ``Py4JJavaError`` whose Java causes include one of ``epto.spark.jvm``'s
    exceptions) as the Python reader's exception of the same name, its message
    starting with the Java class (``epto.spark.jvm.DataLossError: ...``);
    ``None`` for any other error."""
    from ..log import LogCorruptError, LogGapError, LogTailLostError
    from ._source import DataLossError

    kinds: dict[str, type[EptoError]] = {
        "DataLossError": DataLossError,
        "LogCorruptError": LogCorruptError,
        "LogGapError": LogGapError,
        "LogTailLostError": LogTailLostError,
    }
    java = getattr(exc, "java_exception", None)
    for _ in range(32):  # a cause chain is short; never loop on a cyclic one
        if java is None:
            return None
        name = str(java.getClass().getName())
        if name.startswith("epto.spark.jvm."):
            kind = kinds.get(name.rsplit(".", 1)[-1], EptoError)
            return kind(f"{name}: {java.getMessage()}")
        java = java.getCause()
    return None
