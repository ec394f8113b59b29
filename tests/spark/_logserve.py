"""Log servers in a trio loop on a thread, for the network source's tests."""

from __future__ import annotations

from epto.spark._logserver import serve_in_thread as serving

__all__ = ["serving"]
