"""A small subject classifier for the emoji models' evaluation: which of data.IMAGE_SUBJECTS does a picture show?

    python models/recipes/classifier.py              # trains .cache/train/classifier/, prints its accuracy

Trained on the art, never on model samples: each batch is half fresh random stagings of the two art sets'
emoji (edge 12-64 pixels anywhere on a 64-pixel canvas, on white or a scene background, some of it blurred
or through 32 pixels, as video frames are) and half emoji-vq reconstructions of the training placements of
data.build_staged_images (what emoji-image's tokens can draw at best). Its accuracy is reported on the
held-out placements, as pixels and through emoji-vq: the ceiling of the "prompt followed" figure.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import data  # noqa: E402
from mmspec.pipelines.scene import BACKGROUNDS  # noqa: E402

WORK = common.CACHE / "train" / "classifier"
SIZE = 64


class SubjectNet(nn.Module):
    """uint8-range images [B, 3, 64, 64] (float) -> logits [B, n_subjects]: four stride-2 conv blocks, pooled."""

    def __init__(self, n_subjects: int, width: int = 32):
        super().__init__()
        chans = [3, width, 2 * width, 4 * width, 4 * width]
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d(a, b, 3, stride=2, padding=1), nn.BatchNorm2d(b),
                                                    nn.ReLU()) for a, b in zip(chans, chans[1:])])
        self.head = nn.Linear(2 * chans[-1], n_subjects)

    def forward(self, x):
        h = self.blocks(x / 127.5 - 1)  # [B, C, 4, 4]
        return self.head(torch.cat([h.mean((2, 3)), h.amax((2, 3))], 1))


def to_batch(images) -> torch.Tensor:
    """uint8 [B, H, W, 3] (any H = W) -> float [B, 3, 64, 64]."""
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    return x if x.shape[-1] == SIZE else F.interpolate(x, size=SIZE, mode="bilinear", align_corners=False)


def random_staging(sprite: Image.Image, rng) -> np.ndarray:
    """The emoji at a random edge and place, on white (half the time) or a scene background, sometimes blurred or
    rendered at 32 pixels and scaled back up: uint8 [64, 64, 3]."""
    names = list(BACKGROUNDS)
    bg = (255, 255, 255) if rng.random() < 0.5 else BACKGROUNDS[names[int(rng.integers(len(names)))]]
    e = int(rng.integers(12, SIZE + 1))
    x, y = (int(v) for v in rng.integers(0, SIZE - e + 1, size=2))
    canvas = Image.new("RGBA", (SIZE, SIZE), tuple(bg) + (255,))
    canvas.alpha_composite(sprite.resize((e, e), Image.LANCZOS), (x, y))
    im = canvas.convert("RGB")
    if rng.random() < 0.3:
        im = im.resize((32, 32), Image.BILINEAR).resize((SIZE, SIZE), Image.BILINEAR)
    if rng.random() < 0.3:
        im = im.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.2))))
    return np.asarray(im)


def vq_reconstructions(images: np.ndarray, batch: int = 64) -> np.ndarray:
    """images uint8 [N, 64, 64, 3] through emoji-vq and back (what emoji-image can draw at best)."""
    from mmspec.tokenizers import VQTokenizer
    vq = VQTokenizer.from_pretrained(common.ROOT / "models" / "emoji-vq")
    out = []
    for i in range(0, len(images), batch):
        out += [np.asarray(im.convert("RGB")) for im in vq.decode_pil(vq.encode(images[i:i + batch]))]
    return np.stack(out)


@torch.no_grad()
def predict(model: SubjectNet, images, batch: int = 256) -> np.ndarray:
    """Subject index per image (uint8 [N, H, W, 3], 64 or 32 pixels)."""
    model.eval()
    return np.concatenate([model(to_batch(images[i:i + batch])).argmax(-1).numpy()
                           for i in range(0, len(images), batch)])


def load(work: Path = WORK) -> SubjectNet:
    from safetensors.torch import load_file
    model = SubjectNet(len(data.IMAGE_SUBJECTS))
    model.load_state_dict(load_file(str(work / "model.safetensors")))
    return model.eval()


def main():
    from safetensors.torch import save_file
    p = common.base_parser("classifier", minutes=6, lr=2e-3, batch=64)
    p.set_defaults(work=str(WORK))
    args = p.parse_args()
    device = common.setup(args)
    images, test, meta = data.load_staged(per_image=48)  # (48 stagings of each image at random)
    subjects = np.array([m["subject"] for m in meta])
    recon_path = Path(args.work) / f"vq_reconstructions_{common.vq_hash(common.ROOT / 'models' / 'emoji-vq')}.npy"
    if not recon_path.exists():
        np.save(recon_path, vq_reconstructions(images))
    recon = np.load(recon_path)
    sprites = [(data.load_rgba(r["file"]), r["subject"]) for r in data.subject_records()]
    model = SubjectNet(len(data.IMAGE_SUBJECTS)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    run = common.Run(args, model, opt)
    rng = np.random.default_rng(args.seed + run.step)
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    lr = common.lr_at(args, run.step, run.elapsed)
    model.train()
    while not run.done and not args.export_only:
        run.set_lr(lr)
        half = args.batch // 2
        picks = rng.integers(len(sprites), size=half)
        fresh = np.stack([random_staging(sprites[i][0], rng) for i in picks])
        idx = tr[rng.integers(len(tr), size=args.batch - half)]
        x = torch.cat([to_batch(fresh), to_batch(recon[idx])])
        y = torch.from_numpy(np.concatenate([[sprites[i][1] for i in picks], subjects[idx]]))
        loss = F.cross_entropy(model(x), y)
        run.backward_step(loss)
        lr = run.tick()
        if run.step % 20 == 0:
            run.log(loss=round(loss.item(), 4), lr=round(lr, 6))
    run.save()
    model.eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(Path(args.work) / "model.safetensors"))
    acc = {"heldout_placements_pixels": float((predict(model, images[te]) == subjects[te]).mean()),
           "heldout_placements_emoji_vq": float((predict(model, recon[te]) == subjects[te]).mean()),
           "steps": run.step, "train_minutes": round(run.elapsed / 60, 1), "subjects": len(data.IMAGE_SUBJECTS)}
    common.write_json(Path(args.work) / "metrics.json", acc)
    print(json.dumps(acc), flush=True)


if __name__ == "__main__":
    main()
