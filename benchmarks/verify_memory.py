"""Peak host memory of verify steps with deterministic drafts at a large vocabulary.

A stub target returns fixed random logits for B rows x L positions x V tokens, so what is measured
is the engine's own memory around one forward (logits -> p -> drafts -> verification), not a model's.
Run each case in a fresh process (peak RSS only grows):

    python benchmarks/verify_memory.py --method lookup   # B=8, L=64, V=65536
    python benchmarks/verify_memory.py --method coupled

Only mmspec.generate is used, so the same script measures any commit of the engine.
"""
from __future__ import annotations

import argparse
import json
import resource

import torch

import mmspec


class StubTarget:
    """Logits from one fixed random table [B, L, V]: no model, no cache, same cost at every step."""

    def __init__(self, batch: int, window: int, vocab: int):
        self.vocab_size, self.window = vocab, window
        self.table = torch.randn(batch, window, vocab, generator=torch.Generator().manual_seed(0))

    def session(self, condition, layout, *, cfg, num_samples=1, max_window=1):
        return StubSession(self)


class StubSession:
    prompt = None
    draft_vocab = None
    device = torch.device("cpu")

    def __init__(self, target: StubTarget):
        self.target, self.batch_size, self.vocab_size = target, target.table.shape[0], target.vocab_size

    def forward(self, tokens, start):
        return self.target.table[:, : tokens.shape[1]], None


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="lookup")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=65536)
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = StubTarget(args.batch, args.window, args.vocab)
    logits_mib = target.table.numel() * 4 / 2**20
    before = peak_mib()
    out = mmspec.generate(target, torch.zeros(args.batch, dtype=torch.long), mmspec.Sequence1D(2 * args.window),
                          method=args.method, window=args.window, sampling={"temperature": 1.0}, seed=0)
    print(json.dumps({"method": args.method, "B": args.batch, "L": args.window, "V": args.vocab,
                      "steps": out.stats.total_nfe, "logits_MiB": round(logits_mib, 1),
                      "peak_rise_MiB": round(peak_mib() - before, 1),
                      "peak_rise_in_logits": round((peak_mib() - before) / logits_mib, 2)}))


if __name__ == "__main__":
    main()
