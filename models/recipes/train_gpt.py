"""Train `emoji-image` (2D RoPE, 16x16 tokens) or `emoji-video` (3D RoPE, 8 frames of 8x8 tokens).

    python models/recipes/train_gpt.py --model emoji-image     # needs models/emoji-vq (train_vq.py)
    python models/recipes/train_gpt.py --model emoji-video     # needs models/emoji-vq-video (train_vq.py --frames)

mmspec's reference GPT with a token-prefix condition: the prompt's word ids (vocab.json, id 0 = pad =
the null condition, cond_rope "identity"), trained teacher-forced with
`model.forward_sequence(cond, tokens, layout.positions())`. Condition dropout (all-pad prompt: 0.1 for
emoji-video, 0.15 for emoji-image, whose default sampling guides) trains the null condition that
classifier-free guidance needs; otherwise the full word list or a random subset of its words (45% each),
for emoji-image the label alone, the full list or a random subset (28% each), so short prompts like "red
heart" are in distribution, and 30% of those carry filler words (`condition_batch`), so "red heart sticker" is
too. emoji-image trains on data.IMAGE_SUBJECTS at every training placement of every edge (data.build_staged_images;
each edge drawn as often, data.staging_weights: the seed picks the staging, the prompt the subject); its held-out sequences are the same subjects at placements never trained on. The weights
exported are those of the lowest held-out loss (`Best`; `--patience N` stops N measures after it), so a run that
goes on into memorising exports the model that generalised. Images/frames are tokenized once with the VQ and
cached in .cache/data/.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import data  # noqa: E402
from mmspec.pipelines.prompts import encode_prompt  # noqa: E402  (the encoder generation uses)

ROOT = common.ROOT
COND_LEN = 12
MODELS = {
    "emoji-image": dict(tokenizer="emoji-vq", gpt=dict(dim=192, n_layer=6, n_head=6, multiple_of=32, rope_axes=2, block_size=256),
                        layout=("Grid2D", [16, 16]), frame=64, drop=0.15, fillers=0.3,
                        # a small top-k keeps a sprite from derailing on a rare token; on the model trained with fillers
                        # (2026-12-05, all 40 eval_image.py prompts, classifier of 7f4863c / variety) CFG 1.2 0.94 /
                        # 0.95, 1.1 0.93 / 0.93, 1.5 0.87 / 0.78 (guidance narrows the stagings), none 0.91 / 0.93
                        sampling={"temperature": 1.0, "top_k": 5, "cfg_scale": 1.2},
                        prompts=["red heart", "smiling face", "dog face", "pizza", "rocket", "sun", "racing car",
                                 "red apple"]),
    # frame 0 is always given (an image, or the emoji-image model's output): the loss covers frames 1..7
    "emoji-video": dict(tokenizer="emoji-vq-video", gpt=dict(dim=192, n_layer=6, n_head=4, multiple_of=32, rope_axes=3, block_size=512),
                        layout=("Grid3D", [8, 8, 8]), frame=32, given_frames=1, drop=0.1,
                        # t < 1: with frame 0 given, the subject lasts longer and drafts are accepted more often
                        sampling={"temperature": 0.7, "top_k": 50, "cfg_scale": 1.2},
                        prompts=["bounce red apple", "slide right racing car", "zoom in red heart", "rotate sun",
                                 "slide down dog face", "slide left rocket", "zoom out pizza", "bounce soccer ball"]),
}


def make_layout(spec):
    import mmspec
    kind, shape = spec
    return getattr(mmspec, kind)(*shape)


def tokenize(name: str, vq_path: Path, batch: int = 64, clips: int = 6000):
    """-> tokens int16 [N, L], words (list of lists), test mask; cached per VQ weights and data file."""
    from mmspec.tokenizers import VQTokenizer
    h = common.vq_hash(vq_path)
    suffix = "_" + (data.build_staged_images() if name == "emoji-image" else data.build_videos(clips)).stem
    path = common.CACHE / "data" / f"tokens_{name}_{h}{suffix}.npz"
    if path.exists():  # prompt words always come from the current data (they are cheap and may be improved)
        z = np.load(path)
        meta = (data.load_staged() if name == "emoji-image" else data.load_videos(clips))[2]
        return z["tokens"], [m["words"] for m in meta], z["test"]
    vq = VQTokenizer.from_pretrained(vq_path)
    if name == "emoji-image":
        imgs, test, meta = data.load_staged()
        words = [m["words"] for m in meta]
        toks = np.concatenate([vq.encode(imgs[i:i + batch]).flatten(1).numpy() for i in range(0, len(imgs), batch)])
    else:
        videos, test, meta = data.load_videos(clips)
        words = [m["words"] for m in meta]
        frames = videos.reshape(-1, *videos.shape[2:])
        toks = np.concatenate([vq.encode(frames[i:i + batch]).flatten(1).numpy()
                               for i in range(0, len(frames), batch)])
        toks = toks.reshape(len(videos), -1)  # frame-major raster order = Grid3D order
    np.savez(path, tokens=toks.astype(np.int16), words=np.array(json.dumps(words)), test=test)
    print(f"tokenized {name}: {toks.shape} -> {path}", flush=True)
    return toks.astype(np.int16), words, test


def training_data(args):
    """-> tokens [N, L], prompt word lists, test mask, prompt vocabulary, label word lists (emoji-image: a third of
    its prompts are the label alone, "red apple", as users write it; None for emoji-video), sampling weights [N]
    (emoji-image: every edge of its stagings drawn as often, `data.staging_weights`; None: uniform)."""
    if args.pack:
        return read_pack(Path(args.pack), args)
    toks, words, test = tokenize(args.model, Path(args.vq), clips=args.clips)
    vocab = data.build_vocab(data.load_images()[2])
    if args.model != "emoji-image":
        return toks, words, test, vocab, None, None
    meta = data.load_staged()[2]
    return toks, words, test, vocab, [data.words(m["label"]) for m in meta], data.staging_weights(meta)


def write_pack(path: Path, args) -> None:
    """Everything training reads, in one small file, so a machine without the emoji art (a rented GPU) can train:
    `--write-pack FILE` here, `--pack FILE` there."""
    toks, words, test, vocab, labels, weights = training_data(args)
    np.savez_compressed(path, tokens=toks, words=np.array(json.dumps(words)), test=test,
                        vocab=np.array(json.dumps(vocab)), labels=np.array(json.dumps(labels)),
                        vq=np.array(common.vq_hash(Path(args.vq))), model=np.array(args.model),
                        **({} if weights is None else {"weights": weights}))
    print(f"wrote {path}: {toks.shape[0]} sequences of {toks.shape[1]} tokens", flush=True)


def read_pack(path: Path, args):
    """-> tokens, words, test, vocab, labels, weights from `write_pack`'s file; refused if made for another model or
    VQ."""
    z = np.load(path)
    for key, want in (("model", args.model), ("vq", common.vq_hash(Path(args.vq)))):
        if str(z[key]) != want:
            raise SystemExit(f"{path} was packed for {key} {str(z[key])!r}, not {want!r}: rerun --write-pack")
    return (z["tokens"], json.loads(str(z["words"])), z["test"], json.loads(str(z["vocab"])),
            json.loads(str(z["labels"])), z["weights"] if "weights" in z else None)


GPT_SIZES = {"dim", "n_layer", "n_head", "multiple_of"}  # what --gpt may replace

# words the held-out prompts of eval_image.py wrap subjects in ("rocket emoji", "emoji of rocket", "rocket symbol"):
# never used as fillers, so the figure measures wordings the model has not been taught to ignore
HELD_OUT_FILLERS = frozenset({"emoji", "symbol"})


def filler_words(vocab: list[str], word_lists) -> list[str]:
    """The words a prompt may carry beside its subject's in training (`condition_batch`'s fillers): the vocabulary's
    words that no training prompt uses (other emoji's names, which say nothing about these subjects) and the unknown
    word, less HELD_OUT_FILLERS."""
    used = {w for ws in word_lists for w in ws}
    return [w for w in vocab[1:] if w not in used and w not in HELD_OUT_FILLERS]


def condition_batch(word_lists, index, rng, drop: float = 0.1, cond_len: int = COND_LEN, labels=None,
                    fillers: "list[str] | None" = None, filler_share: float = 0.0):
    """Prompt ids [B, cond_len]: none (drop), the full word list, or a random half of it; with `labels` (each
    a word list's leading label words), a third of the kept prompts are the label alone, as users write it. With
    `fillers`, `filler_share` of the kept prompts get one or two of those words at random places ("sticker red apple",
    "red <unk> apple"): users wrap a subject in words of their own, and without this the model of 2026-12-04 drew the
    subject in all 40 samples of eval_image.py's "{subject}" prompts but 6 of 40 of its "emoji of {subject}" ones."""
    out = np.zeros((len(word_lists), cond_len), dtype=np.int64)
    for b, ws in enumerate(word_lists):
        u = rng.random()
        if u < drop:
            continue
        share = (1 - drop) / (3 if labels is not None else 2)
        if labels is not None and u > 1 - share:
            ws = labels[b]
        elif u > drop + share and len(ws) > 1:
            keep = rng.random(len(ws)) < 0.5
            if not keep.any():
                keep[rng.integers(len(ws))] = True
            ws = [w for w, k in zip(ws, keep) if k]
        if fillers and rng.random() < filler_share:
            ws = list(ws)
            for _ in range(1 + int(rng.random() < 0.3)):
                ws.insert(int(rng.integers(len(ws) + 1)), fillers[int(rng.integers(len(fillers)))])
        out[b] = encode_prompt(ws, index, cond_len)
    return torch.from_numpy(out)


def loss_on(logits: torch.Tensor, x: torch.Tensor, start: int, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [B, N, V] against tokens x [B, N] at positions >= start (the given ones are
    context, not targets)."""
    return F.cross_entropy(logits[:, start:].flatten(0, 1).float(), x[:, start:].flatten(), reduction=reduction)


@torch.no_grad()
def heldout_loss(model, toks, words, index, positions, device, start: int = 0, batch: int = 32) -> float:
    """Mean teacher-forced loss (nats/token) of positions >= start over the given (held-out) sequences."""
    model.eval()
    tot, cnt = 0.0, 0
    for i in range(0, len(toks), batch):
        x = torch.from_numpy(toks[i:i + batch].astype(np.int64)).to(device)
        c = torch.tensor([encode_prompt(w, index, COND_LEN) for w in words[i:i + batch]]).to(device)
        tot += loss_on(model.forward_sequence(c, x, positions), x, start, "sum").item()
        cnt += x[:, start:].numel()
    model.train()
    return tot / cnt


def on_tokenizer(spec: dict, vq_path: "str | Path") -> dict:
    """The model's spec with the token grid its tokenizer gives a frame of spec["frame"] pixels (and the GPT's
    block_size to match): emoji-video's 8x8 codes a frame through emoji-vq-video's 4-pixel patches, 16x16 through a
    tokenizer of 2-pixel patches (`train_vq.py --frames --codes patch=2`)."""
    from mmspec.tokenizers import VQTokenizer
    side, rest = spec["frame"] // VQTokenizer.from_pretrained(vq_path).downsample, spec["layout"][1][:-2]
    shape = [*rest, side, side]
    return spec | {"layout": (spec["layout"][0], shape), "gpt": spec["gpt"] | {"block_size": math.prod(shape)}}


def given_length(spec) -> int:
    """Tokens of the layout that are always given at generation (frame 0 of emoji-video), not trained on."""
    shape = spec["layout"][1]
    return spec.get("given_frames", 0) * math.prod(shape[1:])


def main():
    p = common.base_parser("emoji-image", minutes=35, lr=1e-3, batch=16)
    p.add_argument("--model", choices=list(MODELS), default="emoji-image")
    p.add_argument("--vq", help="the VQ tokenizer folder (default: the model's own, models/emoji-vq[-video])")
    p.add_argument("--clips", type=int, default=6000, help="synthetic video clips to train on (emoji-video)")
    p.add_argument("--init", help="an exported model folder to start from (a fresh run only)")
    p.add_argument("--write-pack", metavar="FILE", help="write the tokenized data to FILE for --pack, and exit")
    p.add_argument("--pack", metavar="FILE", help="train from a --write-pack file instead of the emoji art (the "
                   "motion figures of emoji-video are then left to eval_video.py)")
    p.add_argument("--patience", type=int, default=0, metavar="N",
                   help="stop once the held-out loss (measured every 200 steps) has not improved for N measures "
                        "(0: train the whole budget); either way the weights exported are those of its minimum")
    p.add_argument("--gpt", nargs="+", default=[], metavar="KEY=N",
                   help="the GPT's sizes instead of the model's (dim=256 n_layer=8 n_head=8): a larger model for a GPU run")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast for the forward (1.3x faster steps on an avx512_bf16 CPU, refused on a CPU "
                        "without native bf16, where it is ~9x slower; weights and the optimiser stay fp32)")
    argv = sys.argv[1:]
    args = p.parse_args(argv)
    if "--out" not in argv:
        args.out = str(ROOT / "models" / args.model)
    if "--work" not in argv:
        args.work = str(common.CACHE / "train" / args.model)
    device = common.setup(args)
    common.check_bf16(device, args.bf16)
    args.vq = args.vq or str(ROOT / "models" / MODELS[args.model]["tokenizer"])
    spec = on_tokenizer(MODELS[args.model], args.vq)
    if args.write_pack:
        return write_pack(Path(args.write_pack), args)
    toks, words, test, vocab, labels, weights = training_data(args)
    start = given_length(spec)
    index = {w: i for i, w in enumerate(vocab)}
    import mmspec
    layout = make_layout(spec["layout"])
    assert toks.shape[1] == layout.length, (toks.shape, layout)
    # the GPT's vocabulary is the tokenizer's codebook: a larger one would sample ids the VQ cannot decode
    from mmspec.tokenizers import VQTokenizer
    codebook = VQTokenizer.from_pretrained(args.vq).codebook_size
    cfg = mmspec.GPTConfig(vocab_size=codebook, cond_vocab_size=len(vocab), cond_len=COND_LEN, cond_rope="identity",
                           **spec["gpt"] | common.sizes(args.gpt, GPT_SIZES, "--gpt"))
    model = mmspec.GPT(cfg).to(device)
    if args.init:  # overwritten by a checkpoint when one exists (Run resumes it)
        model.load_state_dict(load_bf16(Path(args.init), device).state_dict())
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    run = common.Run(args, model, opt)
    positions = layout.positions().to(device)
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    p_tr = None if weights is None else weights[tr] / weights[tr].sum()  # [N_train] how often each is drawn
    fillers = filler_words(vocab, words) if spec.get("fillers") else None
    best = Best(Path(args.work), fresh=args.fresh)
    print(f"{args.model}: {common.count_params(model) / 1e6:.2f}M params, {len(tr)} train / {len(te)} held out "
          f"sequences of {layout.length} tokens", flush=True)
    rng = np.random.default_rng(args.seed + run.step)
    lr = common.lr_at(args, run.step, run.elapsed)
    model.train()
    while not run.done and not args.export_only:
        run.set_lr(lr)
        idx = tr[rng.choice(len(tr), size=args.batch, p=p_tr)]
        x = torch.from_numpy(toks[idx].astype(np.int64)).to(device)
        c = condition_batch([words[i] for i in idx], index, rng, drop=spec["drop"],
                            labels=None if labels is None else [labels[i] for i in idx], fillers=fillers,
                            filler_share=spec.get("fillers", 0.0)).to(device)
        with run.autocast():
            logits = model.forward_sequence(c, x, positions)  # [B, N, V]
        loss = loss_on(logits, x, start)
        run.backward_step(loss)
        lr = run.tick()
        if run.step % 10 == 0:
            run.log(loss=round(loss.item(), 4), lr=round(lr, 6))
        if run.step % 200 == 0:
            sub, fit = te[:: max(1, len(te) // 96)], tr[:: max(1, len(tr) // 96)]
            held = heldout_loss(model, toks[sub], [words[i] for i in sub], index, positions, device, start)
            run.log(heldout_loss=round(held, 4),
                    train_loss=round(heldout_loss(model, toks[fit], [words[i] for i in fit], index, positions,
                                                  device, start), 4))
            best.see(model, held, run.step)
            if args.patience and run.step - best.step >= 200 * args.patience:
                print(f"held-out loss lowest at step {best.step} ({best.loss:.4f}), not since: stopping", flush=True)
                break
    run.save()
    best.restore(model)
    export(model, cfg, vocab, toks, words, tr, te, positions, device, args, run, spec)


class Best:
    """The weights at the lowest held-out loss so far, in the work folder (a resumed run keeps them): what is exported,
    so a run that goes on past the point where it starts to memorise still exports the model that generalised."""

    def __init__(self, work: Path, fresh: bool = False):
        self.path, self.meta = work / "best.safetensors", work / "best.json"
        if fresh:
            self.path.unlink(missing_ok=True)
            self.meta.unlink(missing_ok=True)
        seen = json.loads(self.meta.read_text()) if self.meta.exists() else {}
        self.loss, self.step = seen.get("loss", math.inf), seen.get("step", 0)

    def see(self, model, loss: float, step: int) -> None:
        if loss < self.loss:
            from safetensors.torch import save_file
            save_file({k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}, str(self.path))
            self.loss, self.step = loss, step
            self.meta.write_text(json.dumps({"loss": loss, "step": step}))

    def restore(self, model) -> None:
        if self.path.exists():
            from safetensors.torch import load_file
            model.load_state_dict(load_file(str(self.path)))
            print(f"exporting the weights of step {self.step} (held-out loss {self.loss:.4f})", flush=True)


def export(model, cfg, vocab, toks, words, tr, te, positions, device, args, run, spec):
    from safetensors.torch import save_file
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = {w: i for i, w in enumerate(vocab)}
    model.eval()
    start = given_length(spec)
    loss = heldout_loss(model, toks[te], [words[i] for i in te], index, positions, device, start)
    save_file(common.bf16_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"model_type": "mmspec-gpt", "gpt": cfg.to_dict(), "layout": {"type": spec["layout"][0],
              "shape": spec["layout"][1]}, "frame_size": spec["frame"],
              "tokenizer": os.path.relpath(Path(args.vq).resolve(), out.resolve()),
              "prompt_vocab": "vocab.json", "default_sampling": spec["sampling"]}
    if spec.get("given_frames"):  # without an image, the pipeline renders frame 0 with the image model, staged as
        config["first_frame_model"] = os.path.relpath(ROOT / "models" / "emoji-image", out.resolve())  # the sprite
        # the clips were trained on (pipelines/scene.py); relative, as the tokenizer's, so an --out anywhere loads
        config["first_frame_staging"] = "emoji-sprite"
    if args.model == "emoji-image":  # what a prompt must name (`mmspec models` lists them; a prompt naming none is told)
        config["subjects"] = data.IMAGE_SUBJECTS
    common.write_json(out / "config.json", config)
    common.write_json(out / "vocab.json", vocab)
    m16 = load_bf16(out, device)
    loss16 = heldout_loss(m16, toks[te], [words[i] for i in te], index, positions, device, start)
    ent, tokens = entropy_and_samples(m16, spec, index, device, out)
    # how well it fits what it was trained on: a model that is to draw named emoji has to know them
    fit = tr[:: max(1, len(tr) // 512)]
    fit_loss = lambda m: round(heldout_loss(m, toks[fit], [words[i] for i in fit], index, positions, device,  # noqa: E731
                                            start), 4)
    metrics = {"heldout_loss_nats": round(loss, 4), "heldout_loss_nats_bf16": round(loss16, 4),
               "heldout_sequences": int(len(te)), "mean_entropy_nats": ent, "default_sampling": spec["sampling"],
               "steps": run.step, "batch": args.batch, "tokens_seen": run.step * args.batch * positions.shape[0],
               "train_minutes": round(run.elapsed / 60, 1), "threads": args.threads, "device": args.device,
               "params": common.count_params(m16), "given_tokens": start, "lr": args.lr, "bf16_autocast": args.bf16,
               "condition_dropout": spec["drop"], "train_sequences": int(len(tr)), "label_prompts": args.model == "emoji-image",
               "train_loss_nats_bf16": fit_loss(m16), "train_sequences_scored": int(len(fit)),
               **({"filler_share": spec["fillers"]} if spec.get("fillers") else {})}
    seen = Path(args.work) / "best.json"
    if seen.exists():  # the weights exported are those of the lowest held-out loss (`Best`)
        metrics["exported_step"] = json.loads(seen.read_text())["step"]
    if args.patience:
        metrics["patience"] = args.patience
    if args.model == "emoji-image":
        metrics["staging"] = {"subjects": len(data.IMAGE_SUBJECTS), "per_image": "every training placement",
                              "edges": list(data.STAGE_EDGES), "edge_weights": "equal",
                              "held_out_placements_percent": data.HELD_OUT_STAGING_PERCENT}
    if device.type == "cuda":  # the card names the GPU it trained on
        metrics["gpu"] = torch.cuda.get_device_name(device)
    if spec["layout"][0] == "Grid3D":
        metrics["clips"] = len(toks)
        if not args.pack:  # the ideal clips need the emoji art
            import eval_video
            metrics["motion"] = eval_video.figures(out, str(device))
    if args.init:  # the model this one started from, on the same measures
        m0 = load_bf16(Path(args.init), device)
        metrics["init"] = {"folder": Path(args.init).name, "heldout_loss_nats_bf16": round(
            heldout_loss(m0, toks[te], [words[i] for i in te], index, positions, device, start), 4),
            "train_loss_nats_bf16": fit_loss(m0)}
    common.write_json(out / "metrics.json", metrics)
    render(tokens, spec, out, args)
    print(metrics, flush=True)


def load_bf16(folder: Path, device) -> "torch.nn.Module":
    """Load an exported folder the way users will: bf16 safetensors into an fp32 GPT."""
    from safetensors.torch import load_file
    import mmspec
    cfg = json.loads((folder / "config.json").read_text())
    model = mmspec.GPT(mmspec.GPTConfig(**cfg["gpt"]))
    model.load_state_dict({k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()})
    return model.to(device).eval()


@torch.no_grad()
def entropy_and_samples(model, spec, index, device, out: Path, per_prompt: int = 4):
    """Sample the card's prompts with plain AR at the default settings, the way users get them (a model with
    given frames through VideoPipeline: frame 0 drawn by its image model); return the mean entropy of p (nats)
    at the generated positions, for the default settings and for raw sampling (t=1, no CFG, no top-k)."""
    import mmspec
    layout = make_layout(spec["layout"])
    start = given_length(spec)
    cond = torch.tensor([encode_prompt(pr, index, COND_LEN) for pr in spec["prompts"]]).to(device)
    if start:
        pipe = mmspec.VideoPipeline.from_pretrained(out, device=device)
        toks = pipe(spec["prompts"], num_outputs=per_prompt, seed=0, method="ar").tokens.to(device)
    else:
        toks = mmspec.generate(mmspec.ReferenceTarget(model), cond, layout, method="ar", window=1,
                               sampling=spec["sampling"], seed=0, num_samples=per_prompt).tokens
    c = cond.repeat_interleave(per_prompt, 0)
    pos = layout.positions().to(device)
    lc = model.forward_sequence(c, toks, pos)[:, start:].float()
    lu = model.forward_sequence(model.null_condition(len(c)), toks, pos)[:, start:].float()
    ent = {}
    for key, s in (("default", spec["sampling"]), ("raw_t1_nocfg", {"temperature": 1.0})):
        s = mmspec.Sampling.coerce(s)
        lp = s.logp(lc, lu if s.cfg else None)
        ent[key] = round(-(lp.exp() * lp.clamp_min(-1e30)).nan_to_num().sum(-1).mean().item(), 3)
    return ent, toks.cpu()


def render(tokens, spec, out: Path, args):
    from PIL import Image
    from mmspec.tokenizers import VQTokenizer
    vq = VQTokenizer.from_pretrained(args.vq)
    n_prompts = len(spec["prompts"])
    per = tokens.shape[0] // n_prompts
    if spec["layout"][0] == "Grid2D":
        h, w = spec["layout"][1]
        ims = vq.decode_pil(tokens.view(-1, h, w))
        S = spec["frame"]
        grid = Image.new("RGB", (per * S, n_prompts * S), "white")
        for i, im in enumerate(ims):
            grid.paste(im, ((i % per) * S, (i // per) * S))
        grid.resize((grid.width * 2, grid.height * 2), Image.NEAREST).save(out / "samples.png")
    else:
        t, h, w = spec["layout"][1]
        S = spec["frame"]
        frames = vq.decode_pil(tokens.view(-1, h, w))  # [B*t] frames
        gif = []
        for f in range(t):
            g = Image.new("RGB", (per * S, n_prompts * S), "white")
            for b in range(tokens.shape[0]):
                g.paste(frames[b * t + f], ((b % per) * S, (b // per) * S))
            gif.append(g.resize((g.width * 3, g.height * 3), Image.NEAREST))
        gif[0].save(out / "samples.gif", save_all=True, append_images=gif[1:], duration=150, loop=0)
        gif[0].save(out / "samples_frame0.png")
        # the sheet: per prompt, its first two samples frame by frame (does the subject last, does it move?)
        sheet = Image.new("RGB", (2 * t * S + S // 2, n_prompts * S), "white")
        for p in range(n_prompts):
            for j in range(min(2, per)):
                for f in range(t):
                    sheet.paste(frames[(p * per + j) * t + f], (j * (t * S + S // 2) + f * S, p * S))
        sheet.resize((sheet.width * 2, sheet.height * 2), Image.NEAREST).save(out / "samples_sheet.png")
    (out / "samples.txt").write_text("\n".join(f"row {i}: {p!r}" for i, p in enumerate(spec["prompts"])) + "\n")


if __name__ == "__main__":
    main()
