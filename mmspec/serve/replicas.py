"""`mmspec serve --backend ray --replicas N`: the same app as a Ray Serve deployment, N replicas each holding the
model (one per GPU where the cluster has GPUs, else one CPU each) behind Ray Serve's HTTP proxy. A replica builds
the app once its model is loaded (Ray Serve's __serve_build_asgi_app__), so the app, its limits, key and queue are
the local backend's, per replica. SIGTERM or Ctrl-C shuts the deployment down: Ray Serve stops routing to the
replicas and lets their requests finish for up to --drain seconds."""
from __future__ import annotations

import signal
import threading

from mmspec.serve.server import Settings

APP = "mmspec"


class Replica:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.pipe = settings.load()

    def __serve_build_asgi_app__(self):
        return self.settings.app(self.pipe)


def deployment(settings: Settings, replicas: int, gpus: bool = False):
    """The bound deployment: `replicas` replicas of the app, each taking `slots` calls and `max_queue` waiting."""
    from ray import serve

    if replicas < 1:
        raise ValueError(f"--replicas must be >= 1, got {replicas}")
    ingress = serve.ingress()(Replica)
    return serve.deployment(
        ingress, name=APP, num_replicas=replicas,
        ray_actor_options={"num_gpus": 1} if gpus else {"num_cpus": 1},
        max_ongoing_requests=settings.slots + settings.max_queue + 1,  # (the app answers 429 past its queue)
        graceful_shutdown_timeout_s=settings.drain_seconds,
    ).bind(settings)


def start(settings: Settings, replicas: int, ray_address: "str | None" = None) -> str:
    """Starts the replicas behind Ray Serve's proxy on settings.host:port -> its URL (Ray is left running)."""
    import ray
    from ray import serve

    settings.check()
    settings.folder()  # (a wrong --model said here, not in every replica)
    if not ray.is_initialized():
        ray.init(address=ray_address, log_to_driver=False, include_dashboard=False)
    gpus = int(ray.cluster_resources().get("GPU", 0)) >= replicas
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(deployment(settings, replicas, gpus), name=APP, route_prefix="/", blocking=False)
    return f"http://{settings.host}:{settings.port}"


def serve_replicas(settings: Settings, replicas: int, ray_address: "str | None" = None) -> None:
    """Serves until SIGTERM or Ctrl-C, then shuts the deployment and the local Ray down."""
    import ray
    from ray import serve

    url = start(settings, replicas, ray_address)
    print(f"mmspec serve: {url} ({replicas} Ray Serve replicas, {settings.slots} slots each)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):  # (a timed wait: the signal handler runs between waits)
        pass
    serve.shutdown()
    ray.shutdown()
