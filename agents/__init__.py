"""The iez OSS agent: reads OST capacity, state switches and I/O counters plus host CPU and memory
on a Lustre object storage server and publishes them to the MDS over ZeroMQ.

It runs on storage servers, so it imports only pyzmq and the standard library.
The message it publishes is described in ``agents/SCHEMA.md``.
"""

from __future__ import annotations

__all__ = ["AgentError", "__version__"]

__version__ = "0.2.0"


class AgentError(Exception):
    """A problem the operator has to fix; the CLI prints it as one line and exits 2."""
