"""`mmspec serve`: the model fixed at start-up, the app served by uvicorn, and SIGTERM drained: new requests get 503
(/health too, so a load balancer stops sending) while the accepted ones finish, for up to --drain seconds; those left
then are answered 503, and the process exits 0. A second signal ends it at once."""
from __future__ import annotations

import ipaddress
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from mmspec.options import CONCURRENCY
from mmspec.serve.schemas import Limits

API_KEY_ENV = "MMSPEC_API_KEY"  # the key, kept out of the process list


@dataclass
class Settings:
    """What `mmspec serve` was started with (the Ray backend sends it to every replica)."""

    model: str  # a model folder, or a bundled model's name
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: "str | None" = None
    slots: int = CONCURRENCY  # calls at a time, as the demo's visitors
    max_queue: int = 16
    limits: Limits = field(default_factory=Limits)
    drain_seconds: float = 30.0
    device: str = "cpu"

    def check(self) -> None:
        """One-line refusals before anything loads."""
        if not loopback(self.host) and not self.api_key:
            raise ValueError(f"--host {self.host} is reachable from other machines: give --api-key KEY (or set "
                             f"${API_KEY_ENV}), which every request must then bear")
        if self.slots < 1 or self.max_queue < 0 or self.drain_seconds < 0:
            raise ValueError("--slots must be >= 1, --max-queue and --drain >= 0")

    def folder(self) -> Path:
        """The model folder: the path given, else the bundled model of that name."""
        from mmspec.pipelines.base import models_dir

        path = Path(self.model)
        if path.is_dir():
            return path
        bundled = models_dir() / self.model
        if bundled.is_dir() and "/" not in self.model:
            return bundled
        names = sorted(p.name for p in models_dir().iterdir() if (p / "config.json").is_file())
        raise FileNotFoundError(f"--model {self.model}: no model folder there, nor a bundled model of that name "
                                f"({', '.join(names)})")

    def name(self) -> str:
        return self.folder().name

    def load(self):
        """The pipeline of the model folder, whatever its family and kind (the serve door of mmspec.families)."""
        from mmspec.families import family_of, kind_of
        from mmspec.pipelines import load_pipeline

        folder = self.folder()
        kind = kind_of(folder, family_of(folder))
        return load_pipeline(kind, folder, device=self.device, door="serve")

    def app(self, pipe=None):
        from mmspec.serve.app import create_app

        pipe = self.load() if pipe is None else pipe
        return create_app(pipe, self.name(), slots=self.slots, max_queue=self.max_queue, limits=self.limits,
                          api_key=self.api_key)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return False


def api_key(given: "str | None") -> "str | None":
    return given or os.environ.get(API_KEY_ENV) or None


def serve(settings: Settings) -> int:
    """Serves until SIGTERM or Ctrl-C (drained) -> the number of requests the drain's deadline cut short."""
    settings.check()
    app = settings.app()
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=5)
    server = DrainingServer(config, app.state.backend, settings.drain_seconds)
    server.run()
    return server.cut


class DrainingServer(uvicorn.Server):
    """uvicorn's Server whose first SIGTERM or SIGINT drains the backend before it stops; `url` once it listens."""

    def __init__(self, config: uvicorn.Config, backend, drain_seconds: float):
        super().__init__(config)
        self.backend, self.drain_seconds = backend, drain_seconds
        self.drainer: "threading.Thread | None" = None
        self.url: "str | None" = None
        self.cut = 0  # requests the drain's deadline cut short

    def handle_exit(self, sig, frame) -> None:
        if self.drainer is not None:  # a second signal: stop now
            self.force_exit = self.should_exit = True
            return
        self.drain()

    def drain(self) -> threading.Thread:
        """Starts the drain (a signal's, or a caller's)."""
        def run():
            self.cut = self.backend.drain(self.drain_seconds)
            self.backend.close()
            self.should_exit = True  # uvicorn then waits for the answers to be written
        self.drainer = threading.Thread(target=run, name="mmspec-serve-drain", daemon=True)
        self.drainer.start()
        return self.drainer

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.url = f"http://{host}:{port}"
            print(f"mmspec serve: {self.url} ({self.backend.slots} slots, queue {self.backend.max_queue})", flush=True)
