"""`guard` and `@tool`: wrap a Python function so every call of it goes through toolgate.

The wrapped function keeps its name, signature and docstring (frameworks read them to build
the tool's schema). Its arguments, bound by name with their defaults, are the call's `args`;
it runs only when the sidecar allows the call (after a human's approval when one is needed),
with the masked arguments when the sidecar masks them, and the wrapper returns what the output
gate lets through, not what the function returned.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .client import AsyncClient, Client

F = TypeVar("F", bound=Callable[..., Any])

_default_sync: Client | None = None
_default_async: AsyncClient | None = None


def default_client() -> Client:
    """The client used when none is given: `$TOOLGATE_URL` and `$TOOLGATE_TOKEN`."""
    global _default_sync
    if _default_sync is None:
        _default_sync = Client()
    return _default_sync


def default_async_client() -> AsyncClient:
    """The async client used when none is given (same environment variables)."""
    global _default_async
    if _default_async is None:
        _default_async = AsyncClient()
    return _default_async


def _args(signature: inspect.Signature, a: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in: the policies decide on what the
    function will run with."""
    bound = signature.bind(*a, **kw)
    bound.apply_defaults()
    args: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            args.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise TypeError("a guarded tool cannot take *args: its arguments need names")
        else:
            args[name] = value
    return args


def guard(
    fn: F,
    *,
    tool: str | None = None,
    client: Client | AsyncClient | None = None,
    conv_id: str | None = None,
) -> F:
    """Wraps `fn` so that calling it runs toolgate's loop (see `Client.call`).

    `tool` is the registered tool name (default: the function's name). A coroutine function
    needs an `AsyncClient`, a plain one a `Client`; without one, the default for the kind is
    made from the environment. Raises the exceptions of `toolgate.errors`.
    """
    name = tool or getattr(fn, "__name__", None)
    if not name:
        raise TypeError("this callable has no __name__: pass the tool's name as `tool=`")
    signature = inspect.signature(fn)
    if inspect.iscoroutinefunction(fn):
        if client is not None and not isinstance(client, AsyncClient):
            raise TypeError(f"{name} is async: guard it with an AsyncClient")
        aclient = client

        @functools.wraps(fn)
        async def guarded_async(*a: Any, **kw: Any) -> Any:
            c = aclient or default_async_client()
            outcome = await c.call(name, _args(signature, a, kw), fn, conv_id=conv_id)
            return outcome.output

        guarded_async.toolgate_tool = name  # type: ignore[attr-defined]
        return guarded_async  # type: ignore[return-value]

    if client is not None and not isinstance(client, Client):
        raise TypeError(f"{name} is not async: guard it with a Client")
    sclient = client

    @functools.wraps(fn)
    def guarded(*a: Any, **kw: Any) -> Any:
        c = sclient or default_client()
        return c.call(name, _args(signature, a, kw), fn, conv_id=conv_id).output

    guarded.toolgate_tool = name  # type: ignore[attr-defined]
    return guarded  # type: ignore[return-value]


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    client: Client | AsyncClient | None = None,
    conv_id: str | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    client: Client | AsyncClient | None = None,
    conv_id: str | None = None,
) -> F | Callable[[F], F]:
    """Decorator form of `guard`: `@toolgate.tool` or `@toolgate.tool(name="read_file")`."""
    if fn is not None:
        return guard(fn, tool=name, client=client, conv_id=conv_id)

    def wrap(f: F) -> F:
        return guard(f, tool=name, client=client, conv_id=conv_id)

    return wrap
