"""Certification harnesses of the MongoDB store.

=====================  ======================================================
``--cortex-store``     backend
=====================  ======================================================
``mongo``              faithful mongomock in process (the embedded default);
                       when ``CORTEX_SPEC_MONGO_URL`` is set, the real server
                       at that URL instead (never a silent fallback: an
                       unreachable URL is *not certified*)
``mongo-url``          the real server at ``CORTEX_SPEC_MONGO_URL`` (refused
                       in one line when unset or unreachable)
``mongo-docker``       a single-node replica set in a ``mongo`` container
                       (needs the ``docker`` extra and a reachable Docker
                       engine), removed afterwards
=====================  ======================================================

On a real server every test gets its own database (``cortex_spec_<hex>``),
dropped after the test; the report names the server's version.  A backend
that cannot start raises :class:`~cortex_spec.errors.BackendUnavailable` with
one clear line, and the run ends *not certified* (exit status 3).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cortex_spec.clock import Clock
from cortex_spec.errors import BackendUnavailable
from cortex_spec.harness import Harness

from .gateway import DEFAULT_LEASE

if TYPE_CHECKING:
    from . import MongoStore

__all__ = [
    "MongoHarness",
    "MongomockHarness",
    "MongoUrlHarness",
    "MongoDockerHarness",
    "URL_ENV",
    "redact_url",
]

#: The environment variable naming a real MongoDB server to certify on.
URL_ENV = "CORTEX_SPEC_MONGO_URL"
#: Docker image and replica-set name of ``mongo-docker`` (override by env).
DOCKER_IMAGE_ENV = "CORTEX_SPEC_MONGO_IMAGE"
DEFAULT_DOCKER_IMAGE = "mongo:7"


def redact_url(url: str) -> str:
    """The URL without its password, for reports and messages."""
    return re.sub(r"(mongodb(?:\+srv)?://[^:/@]+):[^@/]*@", r"\1:***@", url)


def _first_words(exc: BaseException, limit: int = 200) -> str:
    """The gist of a driver error, on one line (drops pymongo's topology dump)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for cut in (" (configured timeouts", ", Timeout:", ", Topology Description"):
        text = text.split(cut, 1)[0]
    return text[:limit]


class LeaseClock:
    """Wall-clock seconds that certification can move forward, so that the
    gateway lease of a crashed holder runs out without a test sleeping
    (GW-OPEN-6)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def corrupt_scope(database: Any, kind: str, key: str, problem: str, prefix: str = "cortex_") -> bool:
    """Give the document of ``key`` of stored kind ``kind`` a stored scope
    with ``problem`` by one update through the driver, behind the store's
    back (feature ``corrupt-scope``): no levels, an empty key at level 0
    (not a scope), or canonical text naming another scope than its levels.
    Runs and suspensions share a slot: ``runs`` is the slot's ``run.scope``,
    ``suspensions`` (keyed by the suspension's id) its ``susp.scope``."""
    if kind == "runs":
        collection, match, path = database[prefix + "runs"], {"_id": key}, "run.scope"
    elif kind == "suspensions":
        collection, match, path = database[prefix + "runs"], {"susp.id": key}, "susp.scope"
    else:
        collection, match, path = database[prefix + kind], {"_id": key}, "scope"
    if problem == "zero":
        update: dict[str, Any] = {"$set": {path: {"n": 0, "c": ""}}}
    elif problem == "unreadable":
        update = {"$set": {f"{path}.k0": ""}}
    elif problem == "inconsistent":
        update = {"$set": {f"{path}.c": "ws=somewhere-else"}}
    else:
        return False
    return bool(collection.update_one(match, update).matched_count == 1)


def plant_schema_version(database: Any, version: int, prefix: str = "cortex_") -> bool:
    """Make the database hold layout ``version`` (feature ``plant-schema``):
    version 0, the collections without their version document (as every
    store before versions were stored left them), or the number of a newer
    version."""
    from .store import SCHEMA_VERSION

    meta = database[prefix + "meta"]
    if version == 0:
        meta.delete_one({"_id": "schema"})
        return True
    if version > SCHEMA_VERSION:
        meta.update_one({"_id": "schema"}, {"$set": {"version": version}}, upsert=True)
        return True
    return False


class _GatewayHooks(Harness):
    """Class ``gateway`` for the Mongo harnesses: locations are database names
    on one gateway client (``self._gateway_client()``), the lock is a lease
    of :data:`DEFAULT_LEASE` seconds on a movable :class:`LeaseClock`, and a
    crash abandons the store (its lease is left to run out)."""

    gateway_lease: float = DEFAULT_LEASE
    _lease_clock: "LeaseClock | None" = None

    def _gateway_client(self) -> Any:
        raise NotImplementedError

    def _gateway_options(self) -> dict[str, Any]:
        if self._lease_clock is None:
            self._lease_clock = LeaseClock()
        return {"gateway_client": self._gateway_client(), "gateway_lease": self.gateway_lease,
                "lease_clock": self._lease_clock}

    def new_gateway_location(self) -> str:
        return f"cortex_gw_{uuid.uuid4().hex[:16]}"

    def discard_gateway_location(self, location: str) -> None:
        try:
            self._gateway_client().drop_database(location)
        except Exception:  # noqa: BLE001 - best effort
            pass

    def crash_gateway(self, gateway: Any) -> None:
        gateway.abandon()

    def expire_gateway_lease(self, location: Any) -> None:
        self._gateway_options()
        assert self._lease_clock is not None
        self._lease_clock.advance(self.gateway_lease + 1.0)

    def unusable_gateway_location(self) -> tuple[str, Callable[[], None]]:
        """A gateway database whose schema version this adapter does not read."""
        name = self.new_gateway_location()
        meta = self._gateway_client()[name]["gw_meta"]
        meta.insert_one({"_id": "schema", "version": 999})
        return name, lambda: meta.delete_one({"_id": "schema"})


def _drivers() -> tuple[Any, Any]:
    try:
        import mongomock
        import pymongo
    except ImportError as exc:
        raise BackendUnavailable(
            f"the mongo extra is not installed ({exc.name} missing): "
            "pip install 'cortex-spec[mongo]'"
        ) from None
    return pymongo, mongomock


class MongomockHarness(_GatewayHooks):
    """Faithful mongomock: each location is an empty in-process storage.

    A new storage the first time; afterwards, a storage a finished test
    left, with every document of the store's collections deleted and the
    collections and their indexes kept, as a server's database emptied
    between tests (the store's open then finds every index and creates
    none: 0.5 against 0.9 ms of processor time for an open and close,
    measured on one core).  A storage is reused only when nothing but the
    store's own collections is in it, no transaction or snapshot session
    holds it, and no layout was planted in it.  Reopening a location opens
    a new client on the same storage (same data, same atomicity lock): a
    faithful restart.  Gateway locations are databases of one more storage
    shared by the whole run (in one process: no ``cross-process``
    feature).
    """

    name = "mongo"
    reopenable = True
    _gw_client: Any = None
    #: the database of the store's collections in every location
    DATABASE = "cortex"

    def __init__(self) -> None:
        self._free: list[Any] = []
        self._planted: set[int] = set()  # id() of locations given another layout

    def start(self) -> None:
        _drivers()

    def _gateway_client(self) -> Any:
        if self._gw_client is None:
            from .faithful import FaithfulClient

            self._gw_client = FaithfulClient()
        return self._gw_client

    def describe(self) -> dict[str, Any]:
        pymongo, mongomock = _drivers()
        return {
            "name": self.name,
            "implementation": "cortex_spec.adapters.mongo.MongoStore",
            "server": f"mongomock {mongomock.__version__} (faithful wrapper)",
            "pymongo": pymongo.version,
            "gateway_lock": f"lease of {self.gateway_lease:g}s renewed by a heartbeat (GW-OPEN-6)",
        }

    def new_location(self) -> Any:
        from .faithful import FaithfulClient

        while self._free:
            location = self._free.pop()
            if self._empty(location):
                return location
        return FaithfulClient()

    def _empty(self, location: Any) -> bool:
        """Delete every document of the store's collections but the layout's
        version (True), or leave the storage alone (False: not reusable)."""
        from .store import COLLECTIONS

        if not location.idle():
            return False
        with location.reopen() as client:
            if client.list_database_names() not in ([], [self.DATABASE]):
                return False
            database = client[self.DATABASE]
            meta = "cortex_" + COLLECTIONS["meta"]
            counts = client.document_counts(self.DATABASE)
            for name in database.list_collection_names():
                if not name.startswith("cortex_"):
                    return False
                # the empty ones need nothing (most of them: a test writes
                # a few kinds; a delete_many on each cost ~0.1 ms)
                if counts.get(name, 1):
                    database[name].delete_many({"_id": {"$ne": "schema"}} if name == meta else {})
        return True

    def open(self, location: Any, clock: Clock) -> MongoStore:
        from . import MongoStore

        client = location.reopen()
        return MongoStore(client[self.DATABASE], clock, close_client=True, **self._gateway_options())

    def discard(self, location: Any) -> None:
        location.close()
        if id(location) in self._planted:
            self._planted.discard(id(location))
        elif location not in self._free:
            self._free.append(location)

    def corrupt_scope(self, location: Any, kind: str, key: str, problem: str) -> bool:
        with location.reopen() as client:
            return corrupt_scope(client[self.DATABASE], kind, key, problem)

    def plant_schema_version(self, location: Any, version: int) -> bool:
        self._planted.add(id(location))  # another layout: never reused
        with location.reopen() as client:
            return plant_schema_version(client[self.DATABASE], version)


class MongoUrlHarness(_GatewayHooks):
    """A real MongoDB server named by a URL (``CORTEX_SPEC_MONGO_URL``)."""

    name = "mongo-url"
    reopenable = True
    #: how long to wait for the server when the URL does not say
    server_selection_timeout_ms = 5000

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self.client: Any = None
        self.info: dict[str, Any] = {}
        self._databases: set[str] = set()

    def _url(self) -> str:
        url = self.url if self.url is not None else os.environ.get(URL_ENV, "")
        url = url.strip()
        if not url:
            raise BackendUnavailable(
                f"{URL_ENV} is not set: set it to the mongodb:// URL of a MongoDB server "
                "to certify on a real server (or use --cortex-store mongo for mongomock)"
            )
        return url

    def start(self) -> None:
        pymongo, _ = _drivers()
        url = self._url()
        shown = redact_url(url)
        kwargs: dict[str, Any] = {"tz_aware": True}
        if "serverselectiontimeoutms" not in url.lower():
            kwargs["serverSelectionTimeoutMS"] = self.server_selection_timeout_ms
        try:
            client = pymongo.MongoClient(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a bad URL is "not certified"
            raise BackendUnavailable(f"bad MongoDB URL {shown}: {_first_words(exc)}") from None
        try:
            build = client.admin.command("buildInfo")
            hello = client.admin.command("hello")
        except Exception as exc:  # noqa: BLE001
            client.close()
            raise BackendUnavailable(
                f"cannot reach MongoDB at {shown}: {type(exc).__name__}: {_first_words(exc)}"
            ) from None
        self.client = client
        topology = (
            f"replica set {hello['setName']}" if hello.get("setName")
            else "sharded cluster" if hello.get("msg") == "isdbgrid"
            else "standalone"
        )
        self.info = {
            "server": f"MongoDB {build.get('version', '?')} ({topology})",
            "url": shown,
        }

    def stop(self) -> None:
        if self.client is None:
            return
        for name in sorted(self._databases):
            try:
                self.client.drop_database(name)
            except Exception:  # noqa: BLE001 - best effort
                pass
        self._databases.clear()
        self.client.close()
        self.client = None

    def describe(self) -> dict[str, Any]:
        pymongo, _ = _drivers()
        return {
            "name": self.name,
            "implementation": "cortex_spec.adapters.mongo.MongoStore",
            **self.info,
            "pymongo": pymongo.version,
            "gateway_lock": f"lease of {self.gateway_lease:g}s renewed by a heartbeat (GW-OPEN-6)",
        }

    def new_location(self) -> str:
        name = f"cortex_spec_{uuid.uuid4().hex[:16]}"
        self._databases.add(name)
        return name

    def _gateway_client(self) -> Any:
        return self.client

    def open(self, location: str, clock: Clock) -> MongoStore:
        from . import MongoStore

        return MongoStore(self.client[location], clock, **self._gateway_options())

    def discard(self, location: str) -> None:
        if self.client is not None:
            try:
                self.client.drop_database(location)
            except Exception:  # noqa: BLE001
                pass
        self._databases.discard(location)

    def corrupt_scope(self, location: str, kind: str, key: str, problem: str) -> bool:
        return corrupt_scope(self.client[location], kind, key, problem)

    def plant_schema_version(self, location: str, version: int) -> bool:
        return plant_schema_version(self.client[location], version)


class MongoHarness(Harness):
    """``--cortex-store mongo``: faithful mongomock, or the server at
    ``CORTEX_SPEC_MONGO_URL`` when that variable is set."""

    name = "mongo"
    reopenable = True

    def __init__(self) -> None:
        url = os.environ.get(URL_ENV, "").strip()
        self.impl: Harness = MongoUrlHarness(url) if url else MongomockHarness()
        self.impl.name = "mongo"

    def start(self) -> None:
        self.impl.start()

    def stop(self) -> None:
        self.impl.stop()

    def describe(self) -> dict[str, Any]:
        return self.impl.describe()

    def new_location(self) -> Any:
        return self.impl.new_location()

    def open(self, location: Any, clock: Clock) -> Any:
        return self.impl.open(location, clock)

    def discard(self, location: Any) -> None:
        self.impl.discard(location)

    # class gateway: delegated (the hooks exist on both implementations)
    @property
    def gateway_lease(self) -> float | None:  # type: ignore[override]
        return self.impl.gateway_lease

    def new_gateway_location(self) -> Any:
        return self.impl.new_gateway_location()

    def discard_gateway_location(self, location: Any) -> None:
        self.impl.discard_gateway_location(location)

    def crash_gateway(self, gateway: Any) -> None:
        self.impl.crash_gateway(gateway)

    def expire_gateway_lease(self, location: Any) -> None:
        self.impl.expire_gateway_lease(location)

    def unusable_gateway_location(self) -> tuple[Any, Callable[[], None]]:
        return self.impl.unusable_gateway_location()

    # class admin: delegated
    def corrupt_scope(self, location: Any, kind: str, key: str, problem: str) -> bool:
        return bool(self.impl.corrupt_scope(location, kind, key, problem))

    def plant_schema_version(self, location: Any, version: int) -> bool:
        return bool(self.impl.plant_schema_version(location, version))


class MongoDockerHarness(MongoUrlHarness):
    """A single-node replica set in a throw-away ``mongo`` container."""

    name = "mongo-docker"
    start_timeout_s = 60.0

    def __init__(self) -> None:
        super().__init__(url=None)
        self.container: Any = None

    def start(self) -> None:
        _drivers()
        try:
            import docker
        except ImportError:
            raise BackendUnavailable(
                "the docker extra is not installed: pip install 'cortex-spec[docker]'"
            ) from None
        try:
            engine = docker.from_env()
            engine.ping()
        except Exception as exc:  # noqa: BLE001
            raise BackendUnavailable(
                f"no reachable Docker engine for mongo-docker: {_first_words(exc)}"
            ) from None
        image = os.environ.get(DOCKER_IMAGE_ENV, DEFAULT_DOCKER_IMAGE)
        try:
            self.container = engine.containers.run(
                image,
                command=["--replSet", "rs0", "--bind_ip_all"],
                detach=True,
                remove=False,
                ports={"27017/tcp": ("127.0.0.1", None)},
                labels={"cortex-spec": "mongo-docker"},
            )
            port = self._wait_for_port()
            self.url = f"mongodb://127.0.0.1:{port}/?directConnection=true"
            self._initiate_replica_set()
            super().start()
        except BackendUnavailable:
            self.stop()
            raise
        except Exception as exc:  # noqa: BLE001
            self.stop()
            raise BackendUnavailable(
                f"the {image} container did not start: {type(exc).__name__}: {_first_words(exc)}"
            ) from None
        self.info["container"] = image

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self.container.reload()
            bindings = (self.container.ports or {}).get("27017/tcp")
            if bindings:
                return int(bindings[0]["HostPort"])
            time.sleep(0.2)
        raise BackendUnavailable("the mongo container published no port in time")

    def _initiate_replica_set(self) -> None:
        import pymongo

        url = self.url
        assert url is not None
        deadline = time.monotonic() + self.start_timeout_s
        client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=1000)
        try:
            while True:
                try:
                    client.admin.command(
                        "replSetInitiate",
                        {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:27017"}]},
                    )
                    break
                except pymongo.errors.OperationFailure as exc:
                    if "already initialized" in str(exc):
                        break
                    raise
                except pymongo.errors.PyMongoError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            while not client.admin.command("hello").get("isWritablePrimary"):
                if time.monotonic() > deadline:
                    raise BackendUnavailable("the replica set elected no primary in time")
                time.sleep(0.3)
        finally:
            client.close()

    def stop(self) -> None:
        super().stop()
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001 - best effort
                pass
            self.container = None
