"""`mmspec.generate`: the one entry point to speculative decoding over any layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from mmspec.adapters.base import Target
from mmspec.layouts import Layout
from mmspec.loop import decode
from mmspec.methods import Method, resolve_method
from mmspec.rng import Streams
from mmspec.sampling import Sampling
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.window import FixedWindow, WindowPolicy, window_policy


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, N] generated tokens, -1 after a row stopped early
    lengths: torch.Tensor  # [B] tokens generated per row
    stats: Stats


def generate(target: Target, condition: Any, layout: Layout, *, method: "str | dict | Method" = "coupled",
             window: "int | WindowPolicy" = 16, sampling: "Sampling | dict | None" = None, seed: "int | Sequence[int]" = 0,
             num_samples: int = 1, stop_tokens: "Sequence[int] | None" = None,
             on_commit: "Callable[[DecodeState, torch.Tensor], None] | None" = None) -> Generation:
    """Generate `num_samples` token sequences per condition, losslessly, with speculation.

    target: a Target (e.g. `ReferenceTarget(gpt)`); condition: what the target is conditioned on
    (class ids [C], prompt ids [C, P]...); layout: Sequence1D / Grid2D / Grid3D; method: a name,
    {'name': ..., options} or a Method;
    window: positions verified per target forward (1..256), or a window policy that picks L at every step;
    sampling: Sampling or a dict of its fields; seed: an int (row i gets seed + i) or one seed per
    row. Rows are ordered condition-major: row i is sample i % num_samples of condition i // num_samples.
    stop_tokens end a row when committed (kept as its last token); on_commit(state, k) is called after
    every forward with the k [B] new tokens per row (streaming; it may end rows with state.finish).
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Sequence1D, Grid2D or Grid3D, not {type(layout).__name__}")
    policy = window_policy(window)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    sampling = Sampling.coerce(sampling)
    method = resolve_method(method)
    if method.window is not None:
        policy = FixedWindow(method.window)
    L = policy.max_window
    session = target.session(condition, layout, cfg=sampling.cfg, num_samples=num_samples, max_window=L)
    B, device = session.batch_size, session.device
    seeds = _seeds(seed, B)
    N = layout.length
    state = DecodeState(
        layout=layout, max_window=L, vocab_size=target.vocab_size, sampling=sampling,
        streams=Streams(seeds, target.vocab_size, device),
        seq=torch.full((B, N + L), -1, dtype=torch.long, device=device),
        forced=torch.cat([layout.forced(), torch.full((L,), -1)]).to(device),
        condition=condition, num_samples=num_samples, prompt=session.prompt,
        draft_vocab=session.draft_vocab)
    stop = None if stop_tokens is None else torch.as_tensor(list(stop_tokens), device=device)
    stats = decode(session, method.make_drafter(layout), method.verifier, policy, state, stop, on_commit)
    tokens = state.seq[:, :N].masked_fill(torch.arange(N, device=device) >= state.n[:, None], -1)
    return Generation(tokens, state.n.clone(), stats)


def _seeds(seed: "int | Sequence[int]", batch: int) -> list[int]:
    if isinstance(seed, int):
        return [seed + i for i in range(batch)]
    seeds = [int(s) for s in seed]
    if len(seeds) != batch:
        raise ValueError(f"got {len(seeds)} seeds for {batch} rows; pass one int or one seed per row")
    return seeds
