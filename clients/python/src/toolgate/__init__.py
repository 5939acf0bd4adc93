"""Python client for toolgate, the sidecar that decides whether an agent's tool call may run.

    import toolgate

    client = toolgate.Client("http://127.0.0.1:8181", token="...")

    @toolgate.tool(client=client)
    def read_file(path: str) -> str:
        return open(path).read()

    read_file(path="src/main.rs")   # authorized, run, and screened; or raises toolgate.Denied

`Client`/`AsyncClient` wrap the HTTP API; `guard`/`tool` wrap a function; the exceptions are in
`toolgate.errors`, the response types in `toolgate.models`, and the framework adapters in
`toolgate.adapters`.
"""

from .client import AsyncClient, Client, Outcome
from .errors import (
    ApprovalDenied,
    ApprovalTimeout,
    Denied,
    OutputBlocked,
    RateLimited,
    RequestRejected,
    ToolFailed,
    ToolgateError,
    Unavailable,
)
from .guard import guard, tool

__version__ = "0.1.0"

__all__ = [
    "ApprovalDenied",
    "ApprovalTimeout",
    "AsyncClient",
    "Client",
    "Denied",
    "Outcome",
    "OutputBlocked",
    "RateLimited",
    "RequestRejected",
    "ToolFailed",
    "ToolgateError",
    "Unavailable",
    "guard",
    "tool",
]
