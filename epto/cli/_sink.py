"""Where ``epto node`` writes its deliveries: JSON lines, and the delivery
log when asked (``--output``, ``--log-dir``)."""

from __future__ import annotations

import argparse
import base64
import json
import time
from typing import Any, TextIO


class Sink:
    """Where deliveries go: JSON lines, and the delivery log when asked."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.out = out
        self.count = 0
        """Deliveries written to the total order (optimistic ones are printed
        but not counted nor logged: their final delivery is)."""
        self.log: Any = None
        if args.log_dir:
            from epto.log import DeliveryLogWriter

            self.log = DeliveryLogWriter(args.log_dir, args.id)

    def write(self, delivery: Any) -> None:
        print(_line(delivery), file=self.out, flush=True)
        if delivery.tag.value in ("optimistic", "revoked"):
            return  # not steps of the total order: the final deliveries are counted and logged
        self.count += 1
        if self.log is not None:
            from epto.log import micros

            self.log.append(delivery, delivered_at=micros(time.time()))

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def _line(delivery: Any) -> str:
    event = delivery.event
    record: dict[str, Any] = {
        "source": event.source,
        "seq": event.seq,
        "ts": event.ts,
        "tag": delivery.tag.value,
    }
    if delivery.reordered:
        record["reordered"] = True
    try:
        record["payload"] = event.payload.decode("utf-8")
    except UnicodeDecodeError:
        record["payload_b64"] = base64.b64encode(event.payload).decode("ascii")
    return json.dumps(record)
