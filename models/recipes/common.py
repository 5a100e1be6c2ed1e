"""Shared training plumbing: time budget, resumable checkpoints, loss logs, bf16 safetensors export.

Every recipe trains against a *time budget* (`--max-minutes`, total training time over all resumes):
the learning rate follows a cosine over the fraction of the budget spent, so a run that is stopped and
resumed follows the same schedule, and a run on a GPU simply does more steps in the same budget.
Checkpoints (model + optimizer + RNG + elapsed time) go to `.cache/train/<name>/ckpt.pt` every
`--save-every` seconds; rerunning the same command resumes from there.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("MMSPEC_CACHE", ROOT / ".cache"))


def base_parser(name: str, minutes: float, lr: float, batch: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=f"train {name}")
    p.add_argument("--max-minutes", type=float, default=minutes, help="total training time budget (all resumes)")
    p.add_argument("--max-steps", type=int, default=10**9)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--threads", type=int, default=1, help="CPU threads (ignored on CUDA)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--save-every", type=float, default=120.0, help="checkpoint period in seconds")
    p.add_argument("--out", default=str(ROOT / "models" / name), help="exported model folder")
    p.add_argument("--work", default=str(CACHE / "train" / name), help="checkpoints and logs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--export-only", action="store_true", help="export the last checkpoint and exit")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    return p


def setup(args) -> torch.device:
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    return torch.device(args.device)


def check_bf16(device: torch.device, bf16: bool, native: "bool | None" = None) -> None:
    """Refuse --bf16 on a CPU without native bf16 (e.g. AVX2 only), where autocast emulates it: an emoji-video
    training step took 45.4 s there against 4.9 s in fp32 (2026-12-05, 1 thread, batch 16)."""
    if not bf16 or device.type != "cpu":
        return
    if native is None:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if not native:
        raise SystemExit(f"--bf16: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16, so "
                         "autocast emulates it and a step takes ~9x as long as in fp32; drop --bf16")


def lr_at(args, step: int, elapsed: float, warmup: int = 100, floor: float = 0.1) -> float:
    frac = min(1.0, elapsed / (60.0 * args.max_minutes))
    w = min(1.0, (step + 1) / warmup)
    return args.lr * w * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))


class Run:
    """Resumable training state: step, elapsed seconds, log file; `done` when the budget is spent."""

    def __init__(self, args, model: torch.nn.Module, opt: torch.optim.Optimizer, extra: dict | None = None):
        self.args, self.model, self.opt = args, model, opt
        self.work = Path(args.work)
        self.ckpt = self.work / "ckpt.pt"
        self.log_path = self.work / "log.jsonl"
        self.step, self.elapsed, self.extra = 0, 0.0, extra or {}
        if self.ckpt.exists() and not args.fresh:
            s = torch.load(self.ckpt, map_location="cpu", weights_only=False)
            model.load_state_dict(s["model"])
            opt.load_state_dict(s["opt"])
            self.step, self.elapsed, self.extra = s["step"], s["elapsed"], s.get("extra", {})
            torch.set_rng_state(s["rng"])
            print(f"resumed {self.ckpt}: step {self.step}, {self.elapsed / 60:.1f} min", flush=True)
        self._t0 = time.time()
        self._base = self.elapsed
        self._last_save = time.time()

    def backward_step(self, loss: torch.Tensor, clip: float = 1.0):
        """One optimiser update from `loss`, gradients clipped to norm `clip`."""
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.opt.step()

    def tick(self) -> float:
        """Call once per step after the update: advances the clock, saves on schedule; returns the lr to use next."""
        self.step += 1
        self.elapsed = self._base + time.time() - self._t0
        if time.time() - self._last_save > self.args.save_every:
            self.save()
        return lr_at(self.args, self.step, self.elapsed)

    @property
    def done(self) -> bool:
        return self.elapsed >= 60.0 * self.args.max_minutes or self.step >= self.args.max_steps

    def autocast(self):
        """The context of a training forward: bf16 autocast where the recipe offers --bf16 and it is given."""
        return torch.autocast(torch.device(self.args.device).type, dtype=torch.bfloat16,
                              enabled=getattr(self.args, "bf16", False))

    def set_lr(self, lr: float):
        for g in self.opt.param_groups:
            g["lr"] = lr

    def log(self, **kv):
        kv = {"step": self.step, "min": round(self.elapsed / 60, 2), **kv}
        with open(self.log_path, "a") as f:
            f.write(json.dumps(kv) + "\n")
        print(json.dumps(kv), flush=True)

    def save(self):
        tmp = self.ckpt.with_suffix(".tmp")
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                    "elapsed": self.elapsed, "rng": torch.get_rng_state(), "extra": self.extra}, tmp)
        os.replace(tmp, self.ckpt)
        self._last_save = time.time()


def sizes(pairs: list[str], allowed: set[str], flag: str) -> dict[str, int]:
    """["dim=256", "n_layer=8"] -> {"dim": 256, "n_layer": 8}: sizes that replace a recipe's defaults (`flag`)."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in allowed or not value.isdigit():
            raise SystemExit(f"{flag} {pair}: expected KEY=N with KEY one of {', '.join(sorted(allowed))}")
        out[key] = int(value)
    return out


def bf16_state_dict(model: torch.nn.Module) -> dict:
    return {k: v.detach().to(torch.bfloat16).contiguous() if v.is_floating_point() else v.detach().contiguous()
            for k, v in model.state_dict().items()}


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj, indent=2) + "\n")


def add_metrics(folder: Path, key: str, result: dict) -> None:
    """Record an evaluation's figures under `key` in a model folder's metrics.json (the cards read them there)."""
    path = Path(folder) / "metrics.json"
    write_json(path, {**json.loads(path.read_text()), key: result})


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def vq_hash(vq_path: Path) -> str:
    """A tokenizer folder's weights in 10 hex digits: what names the data tokenized (or reconstructed) with it."""
    import hashlib
    return hashlib.sha1(b"".join(f.read_bytes() for f in sorted(Path(vq_path).glob("*.safetensors")))).hexdigest()[:10]
