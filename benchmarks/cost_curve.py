"""c(B, L): what one target forward of B rows and L positions costs at a family's real size, beside what the hardware
allows: the memory-bound floor (the weights and the cache's keys and values read once, over the bandwidth a copy
kernel measures on the same device) and the compute floor (the forward's multiply-adds over the rate a large matmul
measures). Random weights (mmspec.synthetic): costs, not acceptance.

Each forward runs through the target's own session (mmspec's cache, masks, RoPE and products, as `mmspec.generate`
runs them) at a cache filled to half the family's sequence, the average a generation attends over. B counts forward
rows: an image family's output with CFG costs two (its B = 1 is 2 here). Eager, and with --compiled torch.compile
of the same forward (mode reduce-overhead on CUDA: CUDA graphs), whose compile time is reported apart.

  python benchmarks/cost_curve.py llamagen-gpt-b [NAME ...] --rows 1,8,32 --windows 1,4,16,64 [--compiled]
      [--device cuda] [--dtype bf16] [--repeats 5] [--threads 2] [--out DIR]

Prints a markdown table per model; with --out writes cost_curve.json and cost_curve.md there, each model's rows as
soon as it is measured (a run cut short keeps what it finished).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from mmspec.bench import environment, sync
from mmspec.synthetic import REAL, build, scaled

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def bandwidth(device: torch.device, megabytes: int = 256) -> float:
    """Bytes per second a copy of `megabytes` moves on `device` (read + write), best of 5."""
    a = torch.empty(megabytes << 18, device=device)  # fp32: megabytes MiB
    b = torch.empty_like(a)
    return 2 * a.numel() * 4 / _best(lambda: b.copy_(a), 5)


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int = 2048) -> float:
    """Multiply-adds x 2 per second of an n x n x n product in `dtype`, best of 5 (the compute floor's rate)."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    return 2 * n**3 / _best(lambda: a @ b, 5)


def _best(fn, repeats: int) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times)


class Forward:
    """One session of `rows` rows whose cache holds `fill` generated tokens; `__call__(L)` runs one forward of L
    positions from there (the cache is set back to `fill` before each: the same work every call)."""

    def __init__(self, model, rows: int, fill: int, max_window: int, compiled: "bool | str"):
        """compiled: False (eager), True (inductor) or another torch.compile backend's name."""
        self.session = model.target.session(model.condition, model.layout, cfg=False, num_samples=rows,
                                            max_window=max_window)
        self.rows, self.fill, self.device = rows, fill, self.session.device
        self.filled = self.session.prefix_len + fill  # cache slots before the forward's first
        self.run = self.session.forward
        if compiled:
            options = {"mode": "reduce-overhead"} if self.device.type == "cuda" else {}
            if isinstance(compiled, str):
                options = {"backend": compiled}
            for t in self.session.buffers():  # written in place: CUDA graphs need them at fixed addresses
                torch._dynamo.mark_static_address(t, guard=False)
            self.run = torch.compile(self.session.forward, fullgraph=True, dynamic=False, **options)
        self.start = torch.full((rows,), fill, dtype=torch.long, device=self.device)

    @torch.no_grad()
    def __call__(self, L: int):
        self.session.cache.lengths.fill_(self.filled)
        return self.run(torch.zeros(self.rows, L, dtype=torch.long, device=self.device), self.start)


def floors(model, rows: int, L: int, fill: int, bytes_per_s: float, flops_per_s: float) -> tuple[float, float]:
    """(memory floor, compute floor) in seconds of a forward of rows x L positions over `fill` cached tokens."""
    shape = model.target.memory_shape(model.condition, model.layout)
    element = next(model.model.parameters()).element_size()
    context = shape.prefix + fill + L  # keys each query attends over (at most)
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * rows * context * shape.element
    attention = 4 * shape.layers * shape.heads * shape.head_dim * rows * L * context  # QK^T and AV
    return (model.params * element + kv) / bytes_per_s, (2 * model.params * rows * L + attention) / flops_per_s


def curve(name: str, rows: list[int], windows: list[int], device: torch.device, dtype: torch.dtype, repeats: int,
          compiled: "bool | str", bytes_per_s: float, flops_per_s: float, spec=None) -> list[dict]:
    """Every (B, L) of one model, eager (and compiled): milliseconds per forward and the floors."""
    model = build(spec or name, dtype=dtype, device=device)
    fill = model.layout.length // 2
    out = []
    for B in rows:
        kinds = {"eager": Forward(model, B, fill, max(windows), False)}
        if compiled:
            kinds["compiled"] = Forward(model, B, fill, max(windows), compiled)
        for L in windows:
            row = {"model": name, "rows": B, "window": L, "fill": fill}
            for kind, forward in kinds.items():
                t = time.perf_counter()
                forward(L)  # (eager: warm-up; compiled: the compile, or its recording)
                sync()
                if kind == "compiled":
                    row["compile_s"] = round(time.perf_counter() - t, 2)
                forward(L)
                sync()
                times = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    forward(L)
                    sync()
                    times.append(time.perf_counter() - t)
                row[f"{kind}_ms"] = round(1e3 * statistics.median(times), 3)
            memory, compute = floors(model, B, L, fill, bytes_per_s, flops_per_s)
            row.update(memory_floor_ms=round(1e3 * memory, 3), compute_floor_ms=round(1e3 * compute, 3))
            out.append(row)
        del kinds
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def table(rows: list[dict]) -> str:
    """Markdown: one line per (model, B, L), each cost also as a multiple of the same B's L = 1."""
    base = {(r["model"], r["rows"]): r for r in rows if r["window"] == 1}
    compiled = any("compiled_ms" in r for r in rows)
    head = "| model | B | L | eager ms | x L=1 |" + (" compiled ms | x L=1 | compile s |" if compiled else "") + \
        " memory floor ms | compute floor ms |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        b = base.get((r["model"], r["rows"]))
        ratio = (lambda k: f"{r[k] / b[k]:.2f}" if b and k in b and k in r else "")
        cells = [r["model"], r["rows"], r["window"], r["eager_ms"], ratio("eager_ms")]
        if compiled:
            cells += [r.get("compiled_ms", ""), ratio("compiled_ms"), r.get("compile_s", "")]
        cells += [r["memory_floor_ms"], r["compute_floor_ms"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", choices=sorted(REAL), metavar="NAME", help=f"of {', '.join(REAL)}")
    ap.add_argument("--rows", default="1,8,32")
    ap.add_argument("--windows", default="1,4,16,64")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="default: bf16 on CUDA, fp32 on a CPU")
    ap.add_argument("--compiled", action="store_true", help="also torch.compile the forward (reported apart)")
    ap.add_argument("--backend", default=None, help="torch.compile backend of --compiled (default: inductor)")
    ap.add_argument("--scaled", action="store_true",
                    help="the tiny versions of the models (mmspec.synthetic.scaled): a rehearsal of the run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    dtype = DTYPES[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    rows, windows = ([int(x) for x in s.split(",")] for s in (a.rows, a.windows))
    bytes_per_s, flops_per_s = bandwidth(device), matmul_rate(device, dtype)
    print(f"copy bandwidth {bytes_per_s / 1e9:.1f} GB/s, {dtype} matmul {flops_per_s / 1e12:.2f} TFLOP/s")
    results = {"environment": {**environment(device), "dtype": str(dtype), "scaled": a.scaled,
                               "load": os.getloadavg()},
               "bandwidth_GBps": round(bytes_per_s / 1e9, 2), "matmul_TFLOPs": round(flops_per_s / 1e12, 3),
               "rows": []}
    for name in a.models:
        compiled = (a.backend or True) if a.compiled else False
        results["rows"] += curve(name, rows, windows, device, dtype, a.repeats, compiled, bytes_per_s, flops_per_s,
                                 scaled(name) if a.scaled else None)
        print(table([r for r in results["rows"] if r["model"] == name]), flush=True)
        if a.out:  # as it goes: a step cut short by its time limit keeps the models it finished
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / "cost_curve.json").write_text(json.dumps(results, indent=1))
            (a.out / "cost_curve.md").write_text(table(results["rows"]) + "\n")


if __name__ == "__main__":
    main()
