"""Where a decode step's time goes: the engine's step split into its parts, beside a plain forward of the model.

    python benchmarks/overhead.py [MODEL_DIR ...] [--rows 1,8] [--methods ar:1,exact] [--yardstick PATH] [--out DIR]

For each model folder (default: the bundled emoji-image and emoji-video), rows and method:window (a method
without a window takes the pipeline's default window: 16 for the image, 64 for the video), one generation runs
through the public pipeline API, and its decode seconds per step (target forward) are split into:
  forward       the session's forward (embedding, the GPT over the KV cache, cache bookkeeping)
  p             Sampling.logp (CFG mix, temperature, top-k / top-p, log-softmax)
  drafting      the drafter's propose and update
  verification  the verifier's call
  commit        mmspec.verify_step._commit
  rest          decode seconds minus all of the above (the loop itself, window policy, forcing, hooks)
and, inside those, `noise`: the time spent in rng.Streams.gumbel (already counted in its caller's column).
A part that is called from inside another part counts for the outer one only. Parts are found by name and
wrapped from here (no instrumentation in the library); a part the engine no longer has is counted in `rest`.

Beside it, `plain`: a forward of the same GPT at the same batch (CFG doubles it) and window, from the middle of
the layout (the mean attention length of a generation), through a KV cache in the engine's mode for the device,
without the engine around it; and with --yardstick PATH (../shared/yardstick/lean_step.py), the lean
gpt-fast-style step of the same shapes at the same rows (`lean`, as the yardstick counts rows) and at the batch
the model runs (`lean@batch`, 2x rows with CFG); `ratio` is the step over `lean`, `ratio@batch` over `lean@batch` (the
same number of sequences: the like-for-like figure for a model that runs CFG). Each shape runs once untimed, then
`--repeats` rounds, each timing the engine's generation, then the plain forward and the lean step over a third of
as many steps, three times; each figure is the least of its rounds (the generation with the fewest decode seconds),
so a host whose speed drifts moves them together. Times are CPU time of this process (see `now`), one thread
unless --threads.

`main(argv)` returns the result dict; with --out DIR it writes overhead.json and overhead.md there.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import json
import math
import pkgutil
import platform
import time
import types
from pathlib import Path

import torch

PARTS = ("forward", "p", "drafting", "verification", "commit")
BUNDLED = ("emoji-image", "emoji-video")
PROMPTS = {"image": ["red heart", "pizza", "rocket", "dog face"],
           "video": ["bounce red apple", "slide right car", "zoom in red heart", "rotate sun"]}


# CPU time of this process: with one thread, what a step costs when it has its core to itself, however busy the
# machine is with other work (wall-clock time on a shared CPU counts the waits for a core too)
now = time.process_time


class Clock:
    """Seconds per part and calls of the session's forward. Only the outermost timed part of a nested call counts,
    so the parts add up to at most the decode time; `noise` and `decode` count wherever they are called from."""

    def __init__(self):
        self.seconds = dict.fromkeys(PARTS + ("noise", "decode"), 0.0)
        self.steps = 0
        self._inside = False

    def wrap(self, part: str, fn):
        def timed(*args, **kwargs):
            nested = self._inside and part in PARTS
            if nested:
                return fn(*args, **kwargs)
            self._inside |= part in PARTS
            t = now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += now() - t
                self._inside &= part not in PARTS
        return timed


def _classes(package: str) -> list[type]:
    """Classes defined in a module or in the modules of a package."""
    names = [package]
    module = importlib.import_module(package)
    if hasattr(module, "__path__"):
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    found = []
    for name in names:
        mod = importlib.import_module(name)
        found += [c for _, c in inspect.getmembers(mod, inspect.isclass) if c.__module__ == name]
    return found


def _targets() -> list[tuple[str, object, str]]:
    """(part, owner, attribute) of every function to time that the engine has now."""
    found = [("p", importlib.import_module("mmspec.sampling").Sampling, "logp"),
             ("noise", importlib.import_module("mmspec.rng").Streams, "gumbel")]
    for cls in _classes("mmspec.drafters"):
        found += [("drafting", cls, a) for a in ("propose", "update") if a in vars(cls)]
    found += [("verification", cls, "__call__") for cls in _classes("mmspec.verify") if "__call__" in vars(cls)]
    step, api = importlib.import_module("mmspec.verify_step"), importlib.import_module("mmspec.api")
    found += [("commit", step, "_commit")] if hasattr(step, "_commit") else []
    found += [("decode", api, "decode")] if hasattr(api, "decode") else []  # what mmspec.generate runs
    return [(part, owner, attr) for part, owner, attr in found if callable(getattr(owner, attr, None))]


@contextlib.contextmanager
def instrumented(pipe, clock: Clock):
    """Time the parts while inside; the session's forward through the pipeline's target."""
    saved = [(owner, attr, vars(owner)[attr]) for _, owner, attr in _targets()]
    target, session = pipe.target, pipe.target.session

    def timed_session(*args, **kwargs):
        s = session(*args, **kwargs)
        forward = clock.wrap("forward", s.forward)

        def counted(*a, **k):
            clock.steps += 1
            return forward(*a, **k)
        s.forward = counted
        return s

    try:
        for part, owner, attr in _targets():
            setattr(owner, attr, clock.wrap(part, getattr(owner, attr)))
        target.session = timed_session
        yield clock
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
        del target.session


def kind_of(model_dir: Path) -> str:
    layout = json.loads((model_dir / "config.json").read_text())["layout"]["type"]
    return {"Grid2D": "image", "Grid3D": "video"}[layout]


def engine_step(pipe, kind: str, rows: int, method: str, window: int, image) -> dict:
    """One generation -> ms per step of the decode and of each part."""
    prompts = [PROMPTS[kind][i % len(PROMPTS[kind])] for i in range(rows)]
    clock = Clock()
    with instrumented(pipe, clock):
        out = pipe(prompts, method=method, window=window, **({"image": image} if kind == "video" else {}))
    ms = {part: s * 1e3 / clock.steps for part, s in clock.seconds.items()}
    total = ms.pop("decode") or out.stats.seconds * 1e3 / clock.steps  # (wall-clock if the loop has moved)
    return {"steps": clock.steps, "step": total, **ms, "rest": total - sum(ms[p] for p in PARTS)}


def plain_forward(pipe, batch: int, window: int, reps: int = 30, rounds: int = 3) -> float:
    """ms of one forward of the GPT alone at [batch, window] from the middle of the layout (best of `rounds`)."""
    from mmspec.cache import StaticKVCache

    model = pipe.target.model
    cfg, layout = model.config, pipe.layout
    w = model.tok_embeddings.weight
    cache = StaticKVCache(cfg.n_layer, batch, cfg.n_kv_head or cfg.n_head, cfg.prefix_len + layout.length + window,
                          model.head_dim, dtype=w.dtype, device=w.device)
    rot = model.rope_table(layout.positions().to(w.device))  # [N + 1, D/2]
    at = layout.length // 2
    tokens = torch.randint(0, cfg.vocab_size, (batch, window), device=w.device)
    rows = (at + torch.arange(window, device=w.device)).clamp(max=layout.length - 1).expand(batch, -1)  # [B, L]
    slots = cfg.prefix_len + at + torch.arange(window, device=w.device).expand(batch, -1)
    cache.lengths.fill_(cfg.prefix_len + at)

    @torch.no_grad()
    def forward():
        return model(model.tok_embeddings(tokens), rot[rows][:, :, None], cache.view(slots))

    for _ in range(5):
        forward()
    best = math.inf
    for _ in range(rounds):
        t = now()
        for _ in range(reps):
            forward()
        best = min(best, (now() - t) / reps * 1e3)
    return best


def load_yardstick(path: str):
    """The yardstick's module, its timer pointed at this process's CPU time like every figure here."""
    spec = importlib.util.spec_from_file_location("lean_step", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.time = types.SimpleNamespace(perf_counter=now)
    return module


def measure(model_dir: Path, rows_list: list[int], methods: list[tuple[str, int | None]], repeats: int,
            yardstick=None) -> list[dict]:
    from mmspec.pipelines import load_pipeline

    kind = kind_of(model_dir)
    pipe = load_pipeline(kind, model_dir, window_cache="off")
    cfg_batch = 2 if float(pipe.default_sampling.get("cfg_scale", 1.0)) != 1.0 else 1
    results = []
    for rows in rows_list:
        image = None
        if kind == "video":  # frame 0 drawn once, outside the timed decodes
            image = pipe.image_model([p.split(" ", 1)[1] for p in PROMPTS[kind]][:1] * rows, method="exact")
        for method, window in methods:
            window = window or pipe.default_window
            engine_step(pipe, kind, rows, method, window, image)  # untimed: one-off allocations
            # in rounds, each timing the engine's generation, then the plain forward and the lean step over about as
            # many steps (in three parts: a least over shorter spans flatters them); each figure the least of its
            # rounds: a shared host's speed drifts by a third within minutes, and a ratio of two figures timed minutes
            # apart measured the drift
            runs, plain, lean, lean_batch = [], [], [], []
            for _ in range(repeats):
                runs.append(engine_step(pipe, kind, rows, method, window, image))
                reps = max(runs[-1]["steps"] // 3, 10)
                plain.append(plain_forward(pipe, rows * cfg_batch, window, reps=reps))
                if yardstick is not None:
                    lean.append(yardstick.time_step(model_dir, rows, window, reps=reps))
                    lean_batch.append(lean[-1] if cfg_batch == 1 else
                                      yardstick.time_step(model_dir, rows * cfg_batch, window, reps=reps))
            best = min(runs, key=lambda r: r["step"])
            row = {"model": model_dir.name, "rows": rows, "batch": rows * cfg_batch, "method": method,
                   "window": window, **best, "plain": min(plain)}
            if yardstick is not None:
                row["lean"], row["lean@batch"] = min(lean), min(lean_batch)
                row["ratio"] = row["step"] / row["lean"]
                row["ratio@batch"] = row["step"] / row["lean@batch"]  # like for like: as many sequences as the engine runs
            results.append(row)
            print(_line(row), flush=True)
    return results


COLUMNS = ("step", *PARTS, "rest", "noise", "plain", "lean", "lean@batch", "ratio", "ratio@batch")


def _line(row: dict) -> str:
    figures = "  ".join(f"{c} {row[c]:6.2f}" for c in COLUMNS if c in row)
    return f"{row['model']} rows {row['rows']} {row['method']} w={row['window']}: {figures}"


def markdown(results: list[dict]) -> str:
    cols = [c for c in COLUMNS if any(c in r for r in results)]
    head = "| model | rows | method | window | steps | " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (5 + len(cols))]
    for r in results:
        lines.append(f"| {r['model']} | {r['rows']} | {r['method']} | {r['window']} | {r['steps']} | "
                     + " | ".join(f"{r[c]:.2f}" if c in r else "" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _methods(spec: str) -> list[tuple[str, int | None]]:
    out = []
    for item in spec.split(","):
        name, _, window = item.partition(":")
        out.append((name, int(window) if window else None))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("models", nargs="*", type=Path, default=[root / "models" / m for m in BUNDLED])
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--methods", default="ar:1,exact", help="METHOD[:WINDOW],... (no window: the pipeline's default)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--yardstick", help="path of lean_step.py")
    ap.add_argument("--out", type=Path, help="folder for overhead.json and overhead.md")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    yardstick = load_yardstick(a.yardstick) if a.yardstick else None
    results = []
    for model in a.models:
        results += measure(model, [int(r) for r in a.rows.split(",")], _methods(a.methods), a.repeats, yardstick)
    result = {"threads": a.threads, "machine": platform.processor() or platform.machine(),
              "torch": torch.__version__, "unit": "ms per step", "results": results}
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "overhead.json").write_text(json.dumps(result, indent=1))
        (a.out / "overhead.md").write_text(markdown(results))
    return result


if __name__ == "__main__":
    main()
