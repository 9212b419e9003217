"""A gateway store held by another process (harness feature ``cross-process``).

The lock of a gateway location must keep out a second *process*
(GW-OPEN-2, GW-RACE-9) and must be released when its holder *dies*
(GW-OPEN-6, GW-CRASH-9).  Neither can be shown inside one process, so the
clause suite and the crash machine start a child Python process that opens
the location and then obeys requests, one JSON object per line on its stdin,
answering one JSON object per line on its stdout::

    {"op": "open", "target": "module:function", "args": [...], "path": [...]}
    {"op": "call", "method": "accept", "args": [...]}
    {"op": "close"}

Answers are ``{"ok": value}`` or ``{"error": "StoreLocked", "message": "..."}``.
Values cross the pipe in a small tagged JSON encoding (:func:`encode` /
:func:`decode`): instants as milliseconds, messages and items as their
fields.  The harness says how the child opens a location
(:meth:`cortex_spec.harness.Harness.gateway_child`).

A child imports the module of its opener as soon as it starts, before the
first request, and :func:`take_child` keeps one such child warm per opener:
a crash test that kills its child gets the next one ready.

The parent side is :class:`GatewayChild`; :meth:`GatewayChild.kill` sends
``SIGKILL``, the death no code in the child can intercept, and
:meth:`GatewayChild.send` writes a request without waiting for its answer so
that a kill can land while the call runs (GW-CRASH-7).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

from .clock import from_millis, to_millis
from .context import Context
from .errors import CortexError
from .gateway import InboundMessage, InboxItem, ItemStatus
from .scope import Scope

__all__ = ["GatewayChild", "ChildFailed", "encode", "decode", "main", "take_child", "kill_spares"]

_ZERO = Context(Scope())


class ChildFailed(AssertionError):
    """The child process died, hung, or answered something unreadable."""


# -- the wire encoding ---------------------------------------------------------------------


def encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$t": to_millis(value)}
    if isinstance(value, InboundMessage):
        return {"$message": {k: getattr(value, k) for k in _MESSAGE_FIELDS}}
    if isinstance(value, InboxItem):
        fields = {k: getattr(value, k) for k in _MESSAGE_FIELDS}
        fields.update(status=str(value.status), reply=value.reply,
                      received_at=None if value.received_at is None else to_millis(value.received_at))
        return {"$item": fields}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "$t" in value:
            return from_millis(value["$t"])
        if "$message" in value:
            return InboundMessage(**value["$message"])
        if "$item" in value:
            fields = dict(value["$item"])
            fields["status"] = ItemStatus(fields["status"])
            fields["received_at"] = from_millis(fields["received_at"])
            return InboxItem(**fields)
        if "$tuple" in value:
            return tuple(decode(v) for v in value["$tuple"])
    return value


_MESSAGE_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted",
                   "agent", "project")


# -- the parent side -------------------------------------------------------------------------


class GatewayChild:
    """A child process that opens one gateway location and obeys requests.

    ``GatewayChild(target, args)`` starts the process;
    :meth:`open` asks it to open the location and returns ``None`` on
    success or the contract error class name (``"StoreLocked"``, ...).
    """

    def __init__(self, target: str, args: list[Any], timeout: float = 60.0) -> None:
        self.target = target
        self.args = list(args)
        self.timeout = timeout
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p]
                                            + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cortex_spec.gateway_child", "--preload",
             target.partition(":")[0]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
            env=env,
        )
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def __enter__(self) -> "GatewayChild":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    # -- requests -----------------------------------------------------------------------

    def send(self, request: dict[str, Any]) -> None:
        """Write one request; do not wait for the answer."""
        line = (json.dumps(request) + "\n").encode("utf-8")
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ChildFailed(f"the gateway child died: {self._tail()}") from exc

    def receive(self) -> dict[str, Any]:
        """Wait for the next answer (at most ``timeout`` seconds)."""
        deadline = time.monotonic() + self.timeout
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildFailed(f"the gateway child did not answer within {self.timeout}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ChildFailed(f"the gateway child died: {self._tail()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return dict(json.loads(line))
        except ValueError as exc:
            raise ChildFailed(f"unreadable answer from the gateway child: {line[:200]!r}") from exc

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send(request)
        return self.receive()

    def open(self) -> str | None:
        """Open the location in the child: None, or the error class name."""
        answer = self.request({"op": "open", "target": self.target, "args": self.args,
                               "path": list(sys.path)})
        if "error" in answer:
            if answer["error"] not in _CONTRACT_ERRORS:
                raise ChildFailed(f"the child's open failed: {answer}")
            return str(answer["error"])
        return None

    def call_request(self, method: str, *args: Any) -> dict[str, Any]:
        return {"op": "call", "method": method, "args": [encode(a) for a in args]}

    def call(self, method: str, *args: Any) -> tuple[str, Any]:
        """``("ok", value)`` or ``("error", class name)`` of one gateway call."""
        answer = self.request(self.call_request(method, *args))
        if "error" in answer:
            return "error", answer["error"]
        return "ok", decode(answer["ok"])

    def close(self) -> None:
        """Close the child's store and let the child exit."""
        try:
            self.request({"op": "close"})
        finally:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait(self.timeout)
            self._stderr.close()

    def kill(self) -> None:
        """``SIGKILL`` the child and reap it (idempotent)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(self.timeout)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        if not self._stderr.closed:
            self._stderr.close()

    def _tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return "(no stderr)"
        return text[-1500:] or "(no stderr)"


_CONTRACT_ERRORS = {"StoreLocked", "StoreError", "InvalidArgument", "StoreClosed"}


# -- the child side ---------------------------------------------------------------------------


def _error_name(exc: BaseException) -> str:
    from . import errors

    for cls in type(exc).__mro__:
        if cls.__module__ == errors.__name__:
            return cls.__name__
    return type(exc).__name__


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


_SPARES: dict[str, GatewayChild] = {}


def take_child(target: str, args: list[Any]) -> GatewayChild:
    """A child for ``target`` that has already imported its module (a spare
    started earlier, when there is one), and a new spare for next time."""
    child = _SPARES.pop(target, None)
    if child is None or child.proc.poll() is not None:
        child = GatewayChild(target, args)
    child.args = list(args)
    _SPARES[target] = GatewayChild(target, [])
    return child


def kill_spares() -> None:
    """Stop the warm children :func:`take_child` keeps."""
    while _SPARES:
        _, child = _SPARES.popitem()
        child.kill()


def main() -> None:
    """Serve requests from stdin until it closes (or the process is killed)."""
    if "--preload" in sys.argv:  # import the opener's module before the first request
        try:
            importlib.import_module(sys.argv[sys.argv.index("--preload") + 1])
        except Exception:  # noqa: BLE001 - the open request reports it
            pass
    store: Any = None
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "open":
                for entry in reversed(request.get("path", [])):
                    if entry not in sys.path:
                        sys.path.insert(0, entry)
                store = _load(request["target"])(*request["args"])
                answer: dict[str, Any] = {"ok": None}
            elif op == "call":
                if store is None:
                    raise RuntimeError("no store is open")
                args = [decode(a) for a in request["args"]]
                answer = {"ok": encode(getattr(store, request["method"])(_ZERO, *args))}
            elif op == "close":
                if store is not None:
                    store.close()
                answer = {"ok": None}
            else:
                answer = {"error": "ProtocolError", "message": f"unknown op {op!r}"}
        except CortexError as exc:
            answer = {"error": _error_name(exc), "message": str(exc)[:500]}
        except Exception as exc:  # noqa: BLE001 - reported, the parent decides
            answer = {"error": type(exc).__name__, "message": str(exc)[:500]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
