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

A child has imported the module of its opener before the first request.
Where the platform can pass descriptors over a Unix socket and fork (Linux,
macOS), a child is forked from a *fork server*: one Python process per
opener module that imports the module once and then forks a child per
request (:class:`ForkServer`), a few milliseconds instead of a fresh
interpreter's second of imports.  A forked child is a process of its own,
with its own descriptors, locks and server sessions, killed by ``SIGKILL``
like any other; the fork server reaps it, so :meth:`GatewayChild.kill`
returns once the child is gone and everything it held is released.
Elsewhere (or with ``CORTEX_SPEC_CHILD_EXEC=1``) each child is a fresh
interpreter, and :func:`take_child` keeps one such child warm per opener:
a crash test that kills its child gets the next one ready.

The parent side is :class:`GatewayChild`; :meth:`GatewayChild.kill` sends
``SIGKILL``, the death no code in the child can intercept, and
:meth:`GatewayChild.send` writes a request without waiting for its answer so
that a kill can land while the call runs (GW-CRASH-7).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .clock import from_millis, to_millis
from .context import Context
from .errors import CortexError
from .gateway import InboundMessage, InboxItem, ItemStatus
from .scope import Scope

__all__ = ["GatewayChild", "ChildFailed", "ForkServer", "start_python", "encode", "decode", "main", "take_child",
           "kill_spares"]

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
        module = target.partition(":")[0]
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if forking():
            self.proc = ForkServer.of(module).spawn(self._stderr.fileno(), timeout)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cortex_spec.gateway_child", "--preload", module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                bufsize=0,
                env=_child_env(),
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


def _child_env() -> dict[str, str]:
    """The environment of a child interpreter: this one's, with its
    ``sys.path`` as ``PYTHONPATH`` (the child imports what this process does)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p]
                                        + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def forking() -> bool:
    """True when children are forked from a :class:`ForkServer` (a Unix
    that passes descriptors over sockets, unless ``CORTEX_SPEC_CHILD_EXEC=1``
    asks for a fresh interpreter per child)."""
    return (hasattr(socket, "send_fds") and hasattr(os, "fork")
            and os.environ.get("CORTEX_SPEC_CHILD_EXEC", "") != "1")


class ForkedProcess:
    """A child forked by a :class:`ForkServer`, seen as much like a
    ``subprocess.Popen`` as :class:`GatewayChild` needs: ``pid``, ``stdin``,
    ``stdout``, ``returncode``, ``poll()`` and ``wait()`` (the fork server
    reaps the child and reports its exit status)."""

    def __init__(self, server: "ForkServer", pid: int, stdin: Any, stdout: Any) -> None:
        self.server = server
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr: Any = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.reap(self.pid, block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.reap(self.pid, block=True, timeout=timeout)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """A Python process that has imported one opener module and forks a
    child per :meth:`spawn` (the child runs :func:`main` on the pipes it is
    handed); one per module and process (:meth:`of`).  It ends when this
    process closes its socket (or exits)."""

    _servers: dict[str, "ForkServer"] = {}
    _servers_lock = threading.Lock()

    def __init__(self, module: str) -> None:
        self.module = module
        self._lock = threading.Lock()
        self.broken = False
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cortex_spec.gateway_child", "--fork-server",
                 str(theirs.fileno()), module],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                pass_fds=[theirs.fileno()], env=_child_env())
        finally:
            theirs.close()

    @classmethod
    def of(cls, module: str) -> "ForkServer":
        """The running fork server of ``module`` (modules to import, comma
        separated; started on first use)."""
        with cls._servers_lock:
            server = cls._servers.get(module)
            if server is None or server.broken or server.proc.poll() is not None:
                server = cls._servers[module] = cls(module)
            return server

    def _ask(self, request: dict[str, Any], fds: Sequence[int] = (), timeout: float | None = 60.0) -> Any:
        with self._lock:
            if self.broken:
                raise ChildFailed(f"the fork server of {self.module} stopped answering")
            try:
                self._sock.settimeout(timeout)
                if fds:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
                else:
                    self._sock.send(json.dumps(request).encode())
                answer = self._sock.recv(65536)
            except socket.timeout:
                # a late answer would be read as the next request's: this
                # server is not asked again (of() starts another)
                self.broken = True
                raise subprocess.TimeoutExpired(f"fork server {self.module}", timeout or 0) from None
            except OSError as exc:
                raise ChildFailed(f"the fork server of {self.module} failed: {exc}; {self._tail()}") from exc
        if not answer:
            raise ChildFailed(f"the fork server of {self.module} died: {self._tail()}")
        out = json.loads(answer)
        if "error" in out:
            raise ChildFailed(f"the fork server of {self.module} could not {request['op']}: {out['error']}")
        return out["ok"]

    def spawn(self, stderr_fd: int, timeout: float = 60.0) -> ForkedProcess:
        """A new child serving :func:`main` on fresh pipes (its stderr goes
        to ``stderr_fd``)."""
        pid, stdin, stdout = self._fork({"op": "spawn"}, stderr_fd, timeout)
        return ForkedProcess(self, pid, open(stdin, "wb", buffering=0), open(stdout, "rb", buffering=0))

    def call(self, function: str, arg: str, timeout: float = 60.0) -> ForkedProcess:
        """A new child running ``function(arg)`` (``"module:function"``),
        its stdin empty and its stdout and stderr piped as text."""
        err_r, err_w = os.pipe()
        try:
            pid, stdin, stdout = self._fork({"op": "spawn", "call": [function, arg]}, err_w, timeout)
        except BaseException:
            os.close(err_r)
            raise
        finally:
            os.close(err_w)
        os.close(stdin)  # the child reads nothing
        proc = ForkedProcess(self, pid, None, open(stdout))
        proc.stderr = open(err_r)
        return proc

    def _fork(self, request: dict[str, Any], stderr_fd: int, timeout: float) -> tuple[int, int, int]:
        """Fork a child on fresh pipes: its pid, and this side's ends of its
        stdin and stdout."""
        child_in, parent_in = os.pipe()
        parent_out, child_out = os.pipe()
        try:
            pid = int(self._ask(request, [child_in, child_out, stderr_fd], timeout))
        except BaseException:
            for fd in (parent_in, parent_out):
                os.close(fd)
            raise
        finally:
            os.close(child_in)
            os.close(child_out)
        return pid, parent_in, parent_out

    def reap(self, pid: int, block: bool, timeout: float | None = None) -> int | None:
        """The exit status of child ``pid`` in ``Popen.returncode``'s form
        (``-9`` for SIGKILL), once it has ended; None while it runs
        (``block=False``)."""
        got = self._ask({"op": "reap", "pid": pid, "block": block}, timeout=timeout)
        return None if got is None else int(got)

    def close(self) -> None:
        self._sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()

    @classmethod
    def close_all(cls) -> None:
        with cls._servers_lock:
            while cls._servers:
                cls._servers.popitem()[1].close()

    def _tail(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")[-1500:] or "(no stderr)"
        except (OSError, ValueError):
            return "(no stderr)"


atexit.register(ForkServer.close_all)


def start_python(function: str, arg: str, preload: Sequence[str] = ()) -> Any:
    """``function(arg)`` (``"module:function"``) in a child process, with
    stdout and stderr piped as text: a ``subprocess.Popen``, or where
    :func:`forking` a :class:`ForkedProcess` forked from the fork server
    that has imported the function's module and ``preload``.  For the
    machines that SIGKILL writer processes (``kill-writer``)."""
    module = function.partition(":")[0]
    if forking():
        return ForkServer.of(",".join(dict.fromkeys([module, *preload]))).call(function, arg)
    code = (f"import sys; from {module} import {function.partition(':')[2]} as f; f(sys.argv[1])")
    return subprocess.Popen([sys.executable, "-c", code, arg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_child_env())


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def fork_server_main(sock_fd: int, module: str) -> None:
    """The fork server: import ``module``, then serve ``spawn`` (fork a child
    that runs :func:`main` on the three descriptors sent with the request)
    and ``reap`` (the exit status of a child) until the socket closes."""
    sock = socket.socket(fileno=sock_fd)
    for name in module.split(","):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - each child's open request reports it
            pass
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 3)
        except OSError:
            return
        if not data:
            return
        request = json.loads(data)
        try:
            if request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:  # the child
                    code = 0
                    try:
                        sock.close()
                        for target, fd in enumerate(fds):
                            os.dup2(fd, target)
                            os.close(fd)
                        if "call" in request:
                            function, arg = request["call"]
                            _load(function)(arg)
                        else:
                            main()
                        sys.stdout.flush()
                    except BaseException:  # noqa: BLE001 - the parent reads stderr
                        traceback.print_exc()
                        code = 1
                    finally:
                        sys.stderr.flush()
                        os._exit(code)
                for fd in fds:
                    os.close(fd)
                answer: dict[str, Any] = {"ok": pid}
            elif request["op"] == "reap":
                done, status = os.waitpid(request["pid"], 0 if request["block"] else os.WNOHANG)
                answer = {"ok": _returncode(status) if done else None}
            else:
                answer = {"error": f"unknown op {request['op']!r}"}
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sock.send(json.dumps(answer).encode())


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
    if forking():  # a fork is ready at once: no spare needed
        return GatewayChild(target, args)
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
    if "--fork-server" in sys.argv:
        at = sys.argv.index("--fork-server")
        fork_server_main(int(sys.argv[at + 1]), sys.argv[at + 2])
    else:
        main()
