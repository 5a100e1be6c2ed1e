"""Train the emoji VQ tokenizers: `emoji-vq` (64x64 image <-> 16x16 codebook ids) and, with --frames,
`emoji-vq-video` (32x32 video frame <-> 8x8 ids). Both are patch VQs (mmspec.reference.patch_vq: each code from its
own 4x4 pixels, so a sprite moved by whole tokens keeps its codes).

    python models/recipes/train_vq.py                 # resumable; --max-minutes sets the total budget
    python models/recipes/train_vq.py --frames        # the video frames' tokenizer

Data: the emoji images (both art sets, skin tones, composited on white) and every training staging of the
emoji-image subjects (data.build_staged_images), plus, for a quarter of each batch, 2x2 mosaics of 32x32 frames
(a shrunken sprite on a plain colour). With --frames: single frames of the synthetic emoji-motion clips the
video model trains on, whose slides and bounces move by whole tokens (mmspec/pipelines/scene.py), so a later
frame's codes are frame 0's, moved. Loss: MSE + 0.1 L1 + the VQ loss. Unused codes are restarted from encoder
outputs of the current batch every 25 steps (keeps the codebook in use).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import data  # noqa: E402

from mmspec.reference.patch_vq import PatchConfig, PatchVQ  # noqa: E402

ROOT = common.ROOT

# frames hold a 14-20 pixel sprite on one of 12 colours: more codes than the 64x64 pictures' (mostly white) need
FRAME_CONFIG = PatchConfig(codebook_size=2048, sample_size=32)
IMAGE_CONFIG = PatchConfig()
DECODER_SIZES = {"dec_channels", "dec_blocks", "pix_channels"}  # what --decoder may replace
CODE_SIZES = {"patch", "hidden", "embed_dim", "codebook_size"}  # what --codes may replace


def to_tensor(imgs: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def mosaic_batch(n: int, imgs: np.ndarray, alpha: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """n 64x64 images, each four 32x32 tiles of a shrunken sprite on a plain random colour, in [-1, 1]."""
    cols = torch.tensor(list(data.BACKGROUNDS.values()), dtype=torch.float32) / 127.5 - 1
    out = torch.empty(n, 3, 64, 64)
    for b in range(n):
        for ty in range(2):
            for tx in range(2):
                i = int(rng.integers(len(imgs)))
                s = int(rng.integers(8, 33))
                rgb = to_tensor(imgs[i:i + 1])
                a = torch.from_numpy(alpha[i:i + 1, None]).float() / 255
                sp = F.interpolate(torch.cat([rgb, a], 1), size=(s, s), mode="bilinear", antialias=True)[0]
                tile = cols[int(rng.integers(len(cols)))][:, None, None].expand(3, 32, 32).clone()
                x, y = (int(v) for v in rng.integers(-s // 4, 32 - s + s // 4 + 1, size=2))
                x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + s, 32), min(y + s, 32)
                patch = sp[:, y0 - y:y1 - y, x0 - x:x1 - x]
                tile[:, y0:y1, x0:x1] = patch[3:] * patch[:3] + (1 - patch[3:]) * tile[:, y0:y1, x0:x1]
                out[b, :, 32 * ty:32 * ty + 32, 32 * tx:32 * tx + 32] = tile
    return out


@torch.no_grad()
def evaluate(vq, x: torch.Tensor, batch: int = 64):
    """-> (PSNR in dB over pixels in [0,1], codebook ids used, all ids) on images x in [-1, 1]."""
    vq.eval()
    mse, ids = [], []
    for i in range(0, len(x), batch):
        xb = x[i:i + batch]
        rec, _, idx, _ = vq(xb)
        rec = rec.clamp(-1, 1)
        mse.append(((rec - xb) / 2).pow(2).flatten(1).mean(1))
        ids.append(idx.flatten())
    vq.train()
    mse = torch.cat(mse)
    psnr = (10 * torch.log10(1 / mse.clamp_min(1e-10))).mean().item()
    ids = torch.cat(ids)
    return psnr, ids.unique().numel(), ids


@torch.no_grad()
def moved_codes_kept(vq, n: int = 64, move: int = 2) -> float:
    """The share of a staged sprite's tokens whose code stays the same when the sprite moves by `move` whole tokens
    on each axis: n training subjects at edge 32, corner (8, 8) against (8 + 4 * move, 8 + 4 * move). A patch VQ
    keeps them all; an AR model learns a subject once only as far as they are kept."""
    recs = data.subject_records()[:n]
    t = data.STAGE_STEP
    a = [data.stage(data.load_rgba(r["file"]), 32, 8, 8) for r in recs]
    b = [data.stage(data.load_rgba(r["file"]), 32, 8 + t * move, 8 + t * move) for r in recs]
    ids_a, ids_b = (vq(to_tensor(np.stack(v)))[2] for v in (a, b))
    s, e = 8 // t, (8 + 32) // t  # the sprite's tokens
    return (ids_a[:, s:e, s:e] == ids_b[:, s + move:e + move, s + move:e + move]).float().mean().item()


def frames_data(clips: int, held_out: int = 200):
    """-> (train frames, held-out frames) uint8 [N, 32, 32, 3]: every frame of the clips (the held-out
    ones: of the first `held_out` held-out clips)."""
    videos, test, _ = data.load_videos(clips)
    return (videos[~test].reshape(-1, *videos.shape[2:]),
            videos[np.flatnonzero(test)[:held_out]].reshape(-1, *videos.shape[2:]))


def main():
    p = common.base_parser("emoji-vq", minutes=25, lr=1e-3, batch=32)
    p.add_argument("--frames", action="store_true", help="the video frames' tokenizer, models/emoji-vq-video "
                   "(defaults then: 30 minutes, no mosaics)")
    p.add_argument("--clips", type=int, default=20000, help="emoji-motion clips whose frames --frames trains on")
    p.add_argument("--mosaic-frac", type=float, default=0.25)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--decoder-only", action="store_true",
                   help="fine-tune only the decoder of --init (codes, hence the GPTs' tokens, unchanged)")
    p.add_argument("--init", default=None, help="tokenizer folder to start from (default: --out)")
    p.add_argument("--decoder", nargs="+", default=[], metavar="KEY=N",
                   help="the decoder's sizes instead of the recipe's (dec_channels=256 dec_blocks=4); with "
                        "--decoder-only, a new decoder of those sizes learns to draw --init's codes")
    p.add_argument("--codes", nargs="+", default=[], metavar="KEY=N",
                   help="the codes' sizes instead of the recipe's (patch=2 hidden=128 codebook_size=1024: 16x16 codes "
                        "a 32-pixel frame; train_gpt.py takes its grid from the tokenizer it is given)")
    argv = sys.argv[1:]
    args = p.parse_args(argv)
    if args.codes and args.decoder_only:
        raise SystemExit("--codes with --decoder-only: the codes are --init's; train a new tokenizer instead")
    config = replace(FRAME_CONFIG if args.frames else IMAGE_CONFIG, **common.sizes(args.decoder, DECODER_SIZES,
                                                                                    "--decoder"),
                     **common.sizes(args.codes, CODE_SIZES, "--codes"))
    if args.frames:
        defaults = {"--max-minutes": ("max_minutes", 30.0), "--mosaic-frac": ("mosaic_frac", 0.0), "--out": ("out", str(ROOT / "models" / "emoji-vq-video")),
                    "--work": ("work", str(common.CACHE / "train" / "emoji-vq-video"))}
        for flag, (name, value) in defaults.items():
            if flag not in argv:
                setattr(args, name, value)
    if args.decoder_only and "--work" not in argv:  # its own checkpoints, not the tokenizer's
        args.work = str(common.CACHE / "train" / f"{Path(args.out).name}-decoder")
    device = common.setup(args)
    if args.frames:
        train_x, test_x = frames_data(args.clips)
        alpha = None
    else:
        imgs, test, meta, alpha = data.load_images(with_alpha=True)
        train_x, test_x = imgs[~test], imgs[test]
        alpha = alpha[~test]
    staged_test = None
    if not args.frames:  # the mosaics draw sprites from the emoji images: the staged pictures come after them
        staged, staged_held, _ = data.load_staged()
        train_x, staged_test = np.concatenate([train_x, staged[~staged_held]]), staged[staged_held]
    x_test = to_tensor(test_x).to(device)
    rng = np.random.default_rng(args.seed)

    vq = PatchVQ(config).to(device)
    params = vq.parameters()
    if args.decoder_only:
        init = PatchVQ.from_pretrained(args.init or args.out)
        if args.decoder:  # a new decoder: only the encoder and the codebook (the codes) come from --init
            vq.load_state_dict({k: v for k, v in init.state_dict().items() if not k.startswith("decoder.")},
                               strict=False)
        else:
            vq.load_state_dict(init.state_dict())
        vq.requires_grad_(False)
        params = list(vq.decoder.parameters())
        for q in params:
            q.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    run = common.Run(args, vq, opt, extra={"rng_np": None})
    print(f"{type(vq).__name__} {common.count_params(vq) / 1e6:.2f}M params, train {len(train_x)}, held out {len(test_x)}",
          flush=True)
    if run.step == 0 and not args.decoder_only:  # initialise the codebook from encoder outputs
        with torch.no_grad():
            # as many latents as 64 images of 64x64 give (16K): 256 frames of 32x32
            xb = to_tensor(train_x[rng.choice(len(train_x), 64 * 4096 // train_x[0, ..., 0].size)]).to(device)
            z = vq(xb)[3]
            z = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
            vq.codebook.copy_(z[torch.randperm(len(z))[:len(vq.codebook)]])
    rng = np.random.default_rng(args.seed + run.step)
    usage = torch.zeros(len(vq.codebook), device=device)
    lr = common.lr_at(args, run.step, run.elapsed)
    n_mosaic = int(round(args.batch * args.mosaic_frac))
    while not run.done and not args.export_only:
        run.set_lr(lr)
        xb = to_tensor(train_x[rng.choice(len(train_x), args.batch - n_mosaic)])
        if n_mosaic:
            xb = torch.cat([xb, mosaic_batch(n_mosaic, train_x[:len(alpha)], alpha, rng)])
        xb = xb.to(device)
        if args.decoder_only:  # the codes are --init's: no gradient reaches the encoder or the codebook
            with torch.no_grad():
                idx = vq.ids(vq.latents(xb))
            rec, commit = vq.pixels(vq.embed(idx)), torch.zeros((), device=device)
        else:
            rec, commit, idx, h = vq(xb)
        mse = F.mse_loss(rec, xb)
        loss = mse + 0.1 * F.l1_loss(rec, xb) + commit
        run.backward_step(loss)
        usage.index_add_(0, idx.flatten(), torch.ones(idx.numel(), device=device))
        if (run.step + 1) % 25 == 0 and not args.decoder_only:  # restart dead codes from this batch's encoder outputs
            with torch.no_grad():
                dead = (usage == 0).nonzero().flatten()
                if len(dead):
                    z = h.detach().permute(0, 2, 3, 1).reshape(-1, h.shape[1])
                    pick = z[torch.randint(len(z), (len(dead),), device=device)]
                    vq.codebook[dead] = pick + 0.01 * torch.randn_like(pick)
                run.extra["restarted"] = run.extra.get("restarted", 0) + len(dead)
            usage.zero_()
        lr = run.tick()
        if run.step % 10 == 0:
            psnr_b = (10 * torch.log10(4 / mse.detach())).item()
            run.log(loss=round(loss.item(), 5), mse=round(mse.item(), 5), commit=round(commit.item(), 5),
                    batch_psnr=round(psnr_b, 2), lr=round(lr, 6), restarted=run.extra.get("restarted", 0))
        if run.step % args.eval_every == 0:
            psnr, used, _ = evaluate(vq, x_test)
            run.log(eval_psnr=round(psnr, 2), eval_codes_used=used)
    run.save()
    export(vq, config, train_x, test_x, args, run, staged_test)


def export(vq, config, train_x, test_x, args, run, staged_test=None):
    from PIL import Image
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vq_cpu = PatchVQ(config)
    vq_cpu.load_state_dict({k: v.cpu() for k, v in vq.state_dict().items()})
    vq_cpu.eval()
    x_test = to_tensor(test_x)
    psnr, used, ids = evaluate(vq_cpu, x_test)
    sub = np.random.default_rng(0).choice(len(train_x), 1024, replace=False)
    _, used_train, ids_train = evaluate(vq_cpu, to_tensor(train_x[sub]))
    all_ids = torch.cat([ids, ids_train])
    counts = torch.bincount(all_ids, minlength=len(vq_cpu.codebook)).float()
    pr = counts / counts.sum()
    perplexity = torch.exp(-(pr[pr > 0] * pr[pr > 0].log()).sum()).item()
    # bf16 export, then re-measure PSNR with the bf16 weights (what users load)
    vq_cpu.save_pretrained(out, dtype=torch.bfloat16)
    vq16 = PatchVQ.from_pretrained(out)
    psnr16, used16, _ = evaluate(vq16, x_test)
    extra = {}
    if staged_test is not None:
        extra["heldout_staged_psnr_db_bf16"] = round(evaluate(vq16, to_tensor(staged_test))[0], 2)
        extra["moved_codes_kept"] = round(moved_codes_kept(vq16), 3)
    # a reconstruction grid: 8 held-out originals (top) and reconstructions (bottom)
    with torch.no_grad():
        xb = x_test[:: max(1, len(x_test) // 8)][:8]
        rec = vq16(xb)[0].clamp(-1, 1)
    grid = torch.cat([torch.cat(list(xb), 2), torch.cat(list(rec), 2)], 1)
    Image.fromarray(((grid.permute(1, 2, 0) + 1) * 127.5).round().byte().numpy()).save(out / "reconstructions.png")
    metrics = {"heldout_psnr_db": round(psnr, 2), "heldout_psnr_db_bf16": round(psnr16, 2),
               "codes_used_heldout": used, "codes_used_train_1024": used_train,
               "codes_used_total": int((counts > 0).sum()), "codebook_size": len(vq_cpu.codebook), **extra,
               "code_perplexity": round(perplexity, 1), "steps": run.step, "batch": args.batch,
               "train_minutes": round(run.elapsed / 60, 1), "threads": args.threads, "device": args.device,
               "params": common.count_params(vq_cpu), "data": "emoji-motion clip frames" if args.frames else
               "emoji images, every staging, frame mosaics", "lr": args.lr}
    common.write_json(out / "metrics.json", metrics)
    print(metrics, flush=True)


if __name__ == "__main__":
    main()
