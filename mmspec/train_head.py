"""Train an EAGLE-3 draft head for a model folder from the model's own samples (`mmspec train-head`).

Self-distillation, offline: mmspec generates samples with the target at its default sampling (random
prompts from the model's own prompt vocabulary, or code openings for text), one teacher-forced target
forward per batch keeps the features the head reads and the target's law p at every position (its
top entries, CFG included where the model uses it), and the head learns to predict p from the
features before it. The loss is EAGLE's: cross-entropy against p plus a regression of the head's
output onto the fused features it stands in for, over `steps` drafting steps in a row ("training-time
test", EAGLE-3): step s sees the true features up to s positions back and its own outputs after them,
exactly as when it drafts slot s of a window.

Everything is resumable: the distilled data (out/train/data.safetensors) and checkpoints (head, optimiser
state and step, out/train/) are safetensors and JSON; running the same command again continues.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from mmspec.reference.eagle import EagleHead, HeadConfig, save_head
from mmspec.sampling import Sampling

TOP = 64  # entries of p kept per position: top-k sampling keeps fewer; top-p's tail past them is dropped
CODE_OPENINGS = ["def ", "import ", "class ", "for ", "if ", "return ", "from ", "    ", "# ", "while ", "try:\n",
                 "with open(", "print(", "x = ", "self.", "@property\n"]


@dataclass
class TrainConfig:
    samples: int = 1024  # sequences distilled
    batch: int = 16  # sequences per generation batch and per training step
    epochs: float = 4.0  # passes over the data
    ttt: int = 3  # drafting steps trained in a row (training-time test)
    lr: float = 2e-3
    regression: float = 0.1  # weight of the feature regression beside the cross-entropy
    decay: float = 0.7  # weight of drafting step s: decay ** s
    text_tokens: int = 128  # new tokens per text sample
    seed: int = 0
    checkpoint_every: int = 100
    draft_vocab: int | None = None  # a smaller draft vocabulary (EAGLE-3's): the tokens the samples use most


class _Target:
    """What training needs from a bundled-style model folder: the target, its layout, default sampling, depth and
    hidden size, embeddings, and conditions for random prompts."""

    def __init__(self, folder: Path, device):
        from mmspec.pipelines import load_pipeline

        config = json.loads((folder / "config.json").read_text())
        self.kind = "text" if config.get("model_type") != "mmspec-gpt" else (
            "video" if config["layout"]["type"] == "Grid3D" else "image")
        self.pipe = load_pipeline(self.kind, folder, draft=None, device=device, window_cache="off")
        self.target = self.pipe.target
        self.sampling = Sampling.coerce(self.pipe.default_sampling)
        if self.kind == "text":
            from mmspec.layouts import Sequence1D

            text = self.target.model.config.get_text_config()
            self.depth, self.hidden_size = text.num_hidden_layers, text.hidden_size
            self.heads, self.base = text.num_attention_heads, getattr(text, "rope_theta", None) or (
                getattr(text, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
            self.layout = None  # per call: Sequence1D(text_tokens)
            self._Sequence1D = Sequence1D
        else:
            gpt = self.target.model.config
            self.depth, self.hidden_size, self.heads, self.base = gpt.n_layer, gpt.dim, gpt.n_head, gpt.rope_base
            self.layout = self.pipe.layout
        self.vocab_size = self.target.vocab_size

    def conditions(self, count: int, rng: random.Random, text_tokens: int):
        """-> (condition for mmspec.generate, layout, given tokens or None) of `count` random prompts. A video
        model whose pipeline gives frame 0 (drawn by its image model, staged) gets it here too: a head distilled
        on frames 0 the target generated itself would learn from clips users never see."""
        if self.kind == "text":
            return [rng.choice(CODE_OPENINGS) for _ in range(count)], self._Sequence1D(text_tokens), None
        words = [w for w in self.pipe.vocab if w.isalpha()]
        prompts = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(count)]
        given = None
        if self.kind == "video" and self.pipe.image_model is not None:
            if self.pipe.staging is not None:  # a scene names its motion first ("bounce red apple")
                from mmspec.pipelines.scene import MOTIONS

                prompts = [f"{rng.choice(MOTIONS)} {p}" for p in prompts]
            given, _ = self.pipe._given(prompts, None, None, seed=rng.randrange(2**31), progress_bar=False)
        return self.pipe.condition(prompts), self.layout, given


def default_config(target: _Target) -> HeadConfig:
    """One decoder layer as wide as the target, reading a low, the middle and the top layer (the inputs of layer 1
    and of layer depth // 2, and the final normed output)."""
    H = target.hidden_size
    return HeadConfig(hidden_size=H, num_attention_heads=target.heads, intermediate_size=32 * math.ceil(8 * H / 3 / 32),
                      vocab_size=target.vocab_size, target_hidden_size=H,
                      target_layers=(1, target.depth // 2, target.depth), rope_theta=float(target.base),
                      rope_axes=1 if target.kind == "text" else target.layout.axes)


@torch.no_grad()
def distill(target: _Target, cfg: HeadConfig, train: TrainConfig, progress: bool = True) -> dict[str, torch.Tensor]:
    """Generate `train.samples` sequences with the target (plain AR) and keep, per sequence, its tokens
    [N], the features before each token [R, N, F] (R = 2 with CFG: the null rows too) and p's top entries
    [N, TOP] (ids, log p) for each token."""
    from tqdm.auto import tqdm

    import mmspec

    rng = random.Random(train.seed)
    out: dict[str, list[torch.Tensor]] = {"tokens": [], "features": [], "top_ids": [], "top_logp": []}
    with tqdm(total=train.samples, desc="distilling", unit="seq", disable=not progress) as bar:
        for first in range(0, train.samples, train.batch):
            count = min(train.batch, train.samples - first)
            cond, layout, given = target.conditions(count, rng, train.text_tokens)
            g = mmspec.generate(target.target, cond, layout, method="ar", given=given,
                                sampling=target.sampling,  # a seed a row: prompts drawn at random may repeat
                                seed=[train.seed * 1_000_003 + first + i for i in range(count)])
            tokens = g.tokens.clamp(min=0)  # [B, N]
            session = target.target.session(cond, layout, cfg=target.sampling.cfg, num_samples=1, max_window=1)
            session.taps = cfg.target_layers
            inputs = torch.cat([tokens.new_full((count, 1), -1), tokens[:, :-1]], 1)  # index -1 is the condition's
            logp = target.sampling.logp(*session.forward(inputs, tokens.new_full((count,), -1)))  # [B, N, V]
            top = logp.topk(min(TOP, logp.shape[-1]), -1)
            R = session.features.shape[0] // count
            out["tokens"].append(tokens.cpu())
            out["features"].append(session.features.view(R, count, *session.features.shape[1:]).transpose(0, 1)
                                   .to(torch.bfloat16).cpu())  # [B, R, N, F]
            out["top_ids"].append(top.indices.to(torch.int32).cpu())
            out["top_logp"].append(top.values.cpu())
            bar.update(count)
    return {k: torch.cat(v) for k, v in out.items()}


def _new_head(cfg: HeadConfig, data: dict[str, torch.Tensor], draft_vocab: int | None) -> EagleHead:
    """A fresh head; with `draft_vocab`, over the ids the distilled samples use most (d2t / t2d map them)."""
    if draft_vocab is None or draft_vocab >= cfg.vocab_size:
        return EagleHead(cfg)
    counts = torch.bincount(data["tokens"].flatten().long(), minlength=cfg.vocab_size)
    ids = counts.topk(draft_vocab).indices.sort().values  # [V_draft] target ids, ascending
    head = EagleHead(dataclasses.replace(cfg, draft_vocab_size=draft_vocab))
    head.d2t.copy_(ids - torch.arange(draft_vocab))
    head.t2d.zero_().scatter_(0, ids, True)
    return head


def _ttt_mask(N: int, s: int, device) -> torch.Tensor:
    """[N, (s+1) N] which keys a query of drafting step s at index i sees: the true pairs at indices <= i - s
    (step 0's keys), and step r's own key at index i - s + r for r = 1..s (the drafts before it in the window)."""
    i = torch.arange(N, device=device)[:, None]
    j = torch.arange(N, device=device)[None, :]
    blocks = [j <= i - s] + [j == i - s + r for r in range(1, s + 1)]
    mask = torch.cat(blocks, 1)
    return mask | ~mask.any(1, keepdim=True)  # a query with nothing to see yet (i < s) sees all: its loss is masked


def head_loss(head: EagleHead, embed, batch: dict[str, torch.Tensor], sampling: Sampling, train: TrainConfig,
              rope) -> tuple[torch.Tensor, list[float]]:
    """The training-time-test loss of one batch -> (loss, per-step accuracy of the head's argmax against p's)."""
    tokens, features = batch["tokens"], batch["features"].float()  # [B, N], [B, R, N, F]
    B, R, N, _ = features.shape
    embeds = embed(tokens).float()[:, None].expand(B, R, N, -1).reshape(B * R, N, -1)  # pair i: token i
    fused = head.fc(features.reshape(B * R, N, -1))  # pair i: the features of index i-1 (what predicted token i)
    # q as the sampler makes it but untruncated: top-k / top-p would cut tokens p has off from any gradient
    sampling = dataclasses.replace(sampling, top_k=None, top_p=None)
    ids, p = batch["top_ids"].long(), batch["top_logp"].exp()  # [B, N, TOP]: p of token c is column c
    hidden, keys, values = fused, [], []
    loss, acc = 0.0, []
    for s in range(train.ttt):
        q_, k_, v_ = head.qkv(embeds, hidden, rope)
        keys.append(k_)
        values.append(v_)
        out, logits = head.attend(hidden, q_, torch.cat(keys, 2), torch.cat(values, 2), _ttt_mask(N, s, tokens.device))
        z = head.to_target(logits.float()).view(B, R, N, -1)
        if sampling.temperature > 0:
            logq = sampling.logp(z[:, 0], z[:, 1] if R == 2 else None)  # [B, N, V]
        else:  # a greedy target: cross-entropy against its argmax
            logq = z[:, 0].log_softmax(-1)
        # pair i drafts token i+1 at step s when it sees true pairs up to i - s: pairs s .. N-2
        lq, pid, pp = logq[:, s:N - 1], ids[:, s + 1:], p[:, s + 1:]
        if head.maps_vocabulary():  # p's mass outside the draft vocabulary is out of q's reach: no loss there
            pp = pp * head.t2d[pid]
        weight = train.decay ** s
        loss = loss + weight * -(pp * lq.gather(-1, pid)).sum(-1).mean()
        # the output at pair i stands in for the true fused features of pair i+1
        guess = out[:, s:N - 1].reshape(B, R, N - 1 - s, -1)
        target = fused.detach()[:, s + 1:].reshape(B, R, N - 1 - s, -1)
        loss = loss + weight * train.regression * F.smooth_l1_loss(guess, target)
        acc.append(float((lq.argmax(-1) == pid[..., 0]).float().mean()))
        hidden = torch.cat([fused[:, :1], out[:, :-1]], 1)  # the next step's pair i+1 reads this output at i
    return loss, acc


def _save_checkpoint(folder: Path, head: EagleHead, opt: torch.optim.Optimizer, step: int, log: list,
                     seconds: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = {id(p): n for n, p in head.named_parameters()}
    state = {}
    for group in opt.param_groups:
        for p in group["params"]:
            for key, value in opt.state.get(p, {}).items():
                if torch.is_tensor(value):
                    state[f"{names[id(p)]}::{key}"] = value.contiguous()
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(folder / "head.tmp"))
    save_file(state, str(folder / "optim.tmp"))
    (folder / "head.tmp").replace(folder / "head.safetensors")  # a stop mid-write leaves the last checkpoint whole
    (folder / "optim.tmp").replace(folder / "optim.safetensors")
    (folder / "state.json").write_text(json.dumps({"step": step, "log": log, "seconds": round(seconds, 1)}))


def _load_checkpoint(folder: Path, head: EagleHead, opt: torch.optim.Optimizer) -> tuple[int, list, float]:
    """-> (steps done, the log, seconds of training so far)."""
    if not (folder / "state.json").is_file():
        return 0, [], 0.0
    head.load_state_dict(load_file(str(folder / "head.safetensors")))
    params = dict(head.named_parameters())
    saved = load_file(str(folder / "optim.safetensors"))
    for key, value in saved.items():
        name, field = key.split("::")
        opt.state[params[name]][field] = value
    raw = json.loads((folder / "state.json").read_text())
    return raw["step"], raw["log"], raw.get("seconds", 0.0)


def train_head(model: "str | Path", out: "str | Path | None" = None, train: TrainConfig | None = None,
               device: str = "cpu", progress: bool = True) -> Path:
    """Train (or go on training) a head for the model folder `model`; write it to `out` (default model/head):
    config.json with its card, model.safetensors (bf16), README.md. Returns `out`."""
    model = Path(model)
    out = Path(out) if out is not None else model / "head"
    train = train or TrainConfig()
    work = out / "train"
    started = time.perf_counter()
    target = _Target(model, device)
    cfg = default_config(target)
    data_file = work / "data.safetensors"
    if data_file.is_file():
        data = load_file(str(data_file))
    else:
        data = distill(target, cfg, train, progress)
        work.mkdir(parents=True, exist_ok=True)
        save_file(data, str(work / "data.tmp"))
        (work / "distill.json").write_text(json.dumps({"seconds": round(time.perf_counter() - started, 1)}))
        (work / "data.tmp").replace(data_file)
    timed = work / "distill.json"  # (absent for data distilled before it was written)
    distill_seconds = json.loads(timed.read_text())["seconds"] if timed.is_file() else 0.0
    torch.manual_seed(train.seed)
    head = _new_head(cfg, data, train.draft_vocab).to(device)
    embed = target.target.model.get_input_embeddings() if target.kind == "text" else target.target.model.tok_embeddings
    N = data["tokens"].shape[1]
    positions = (torch.arange(N)[:, None] if target.kind == "text" else target.layout.positions()).to(device)
    rope = head.rope(positions)  # [N, 1, hd] each
    total = max(1, int(train.epochs * len(data["tokens"]) / train.batch))
    opt = torch.optim.AdamW(head.parameters(), lr=train.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step, log, trained = _load_checkpoint(work, head, opt)
    resumed = time.perf_counter()
    from tqdm.auto import tqdm

    order = torch.Generator().manual_seed(train.seed)
    perm = torch.cat([torch.randperm(len(data["tokens"]), generator=order) for _ in range(math.ceil(train.epochs) + 1)])
    head.train()
    with tqdm(total=total, initial=step, desc="training head", unit="step", disable=not progress) as bar:
        while step < total:
            rows = perm[step * train.batch:(step + 1) * train.batch]
            batch = {k: v[rows].to(device) for k, v in data.items()}
            for group in opt.param_groups:  # warm-up, then cosine
                group["lr"] = train.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / total))
            loss, acc = head_loss(head, embed, batch, target.sampling, train, rope)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=" ".join(f"{a:.2f}" for a in acc))
            if step % 20 == 0 or step == total:
                log.append({"step": step, "loss": round(loss.item(), 4), "top1": [round(a, 3) for a in acc]})
            if step % train.checkpoint_every == 0 or step == total:
                _save_checkpoint(work, head, opt, step, log, trained + time.perf_counter() - resumed)
    head.eval()
    acceptance = evaluate(target, head, train)
    head.config.card = {"trained_by": "mmspec train-head (mmspec/train_head.py)", "target": model.name,
                "samples": len(data["tokens"]), "tokens_per_sample": N, "sampling": target.pipe.default_sampling,
                "steps": step, "batch": train.batch, "ttt": train.ttt, "lr": train.lr,
                "threads": torch.get_num_threads(), "device": device,
                "distill_minutes": round(distill_seconds / 60, 1),
                "minutes": round((distill_seconds + trained + time.perf_counter() - resumed) / 60, 1),
                "last_log": log[-3:],
                "acceptance": acceptance}
    save_head(head, out)
    (out / "README.md").write_text(card_text(head.config.card))
    return out


EVAL_WINDOW = 6


@torch.no_grad()
def evaluate(target: _Target, head: EagleHead, train: TrainConfig, prompts: int = 8) -> dict:
    """Acceptance on prompts the head never saw (another seed), one row each, window EVAL_WINDOW: the head
    (`exact` draws, AR's tokens) against the Jacobi window's `exact`, per slot and as mean tokens per forward."""
    import mmspec

    cond, layout, given = target.conditions(prompts, random.Random(train.seed + 10_007), train.text_tokens)
    result = {"window": EVAL_WINDOW, "prompts": prompts}
    for name, method in (("eagle", {"name": "eagle", "head": head, "exact": True}), ("exact", "exact")):
        g = mmspec.generate(target.target, cond, layout, method=method, window=EVAL_WINDOW, given=given,
                            sampling=target.sampling, seed=[train.seed + 1 + i for i in range(prompts)])  # (a row each)
        st = g.stats
        per_slot = st.accepted_at.sum(0).float() / st.forwards_at.sum(0).clamp(min=1).float()
        result[name] = {"tokens_per_forward": round(float(st.committed.sum() / st.nfe.sum()), 3),
                        "accepted_per_slot": [round(float(a), 3) for a in per_slot[: EVAL_WINDOW - 1]]}
    return result


def card_text(card: dict) -> str:
    acc = card["acceptance"]
    lines = [f"# EAGLE-3 draft head for {card['target']}", "",
             f"Trained by `mmspec train-head` on {card['samples']} samples of the model's own ({card['tokens_per_sample']} "
             f"tokens each, sampling {card['sampling']}), {card['steps']} steps of {card['batch']} sequences, "
             f"{card['ttt']} drafting steps in a row, on {card['device']} with {card['threads']} thread(s): "
             f"{card['minutes']} minutes in all ({card['distill_minutes']} generating and distilling).", "",
             f"Acceptance on {acc['prompts']} prompts it never saw, one row each, window {acc['window']}, `exact` draws "
             "(the tokens of `ar`):", "",
             "| drafts | tokens per forward | accepted at slot 0, 1, ... |", "|---|---|---|"]
    for name in ("eagle", "exact"):
        label = "this head" if name == "eagle" else "Jacobi window (`exact`)"
        lines.append(f"| {label} | {acc[name]['tokens_per_forward']} | {acc[name]['accepted_per_slot']} |")
    return "\n".join(lines + ["", "Weights: model.safetensors (bf16), config.json in the EAGLE-3 layout (see "
                              "mmspec/reference/eagle.py); the training log's last entries are in config.json's card.", ""])
