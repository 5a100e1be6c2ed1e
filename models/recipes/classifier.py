"""A small subject classifier for the emoji models' evaluation: which of data.IMAGE_SUBJECTS does a picture show?

    python models/recipes/classifier.py              # trains .cache/train/classifier/, prints its accuracy

Trained on the art, never on model samples: each batch is a third fresh random stagings of the two art sets'
emoji (edge 12-64 pixels anywhere on a 64-pixel canvas, on white or a scene background, some of it turned, blurred
or through 32 pixels, as video frames are), a third emoji-vq reconstructions of the training placements of
data.build_staged_images (what emoji-image's tokens can draw at best) and a third emoji-vq-video reconstructions of
32-pixel frames of the video scene (mmspec/pipelines/scene.py: any motion, any frame; what emoji-video's tokens can
draw at best). Its accuracy is reported on the held-out placements, as pixels and through emoji-vq, and on fresh
scene frames, as pixels and through emoji-vq-video: the ceilings of the "prompt followed" and "subject named" figures.
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
from mmspec.pipelines.scene import BACKGROUNDS, MOTIONS, place, pose  # noqa: E402

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
    """The emoji at a random edge and place, on white (half the time) or a scene background, sometimes turned (as the
    scene's rotate does), blurred or rendered at 32 pixels and scaled back up: uint8 [64, 64, 3]."""
    names = list(BACKGROUNDS)
    bg = (255, 255, 255) if rng.random() < 0.5 else BACKGROUNDS[names[int(rng.integers(len(names)))]]
    e = int(rng.integers(12, SIZE + 1))
    x, y = (int(v) for v in rng.integers(0, SIZE - e + 1, size=2))
    sp = sprite.resize((e, e), Image.LANCZOS)
    if rng.random() < 0.2:
        sp = sp.rotate(float(rng.uniform(0, 360)), resample=Image.BICUBIC, expand=False)
    canvas = Image.new("RGBA", (SIZE, SIZE), tuple(bg) + (255,))
    canvas.alpha_composite(sp, (x, y))
    im = canvas.convert("RGB")
    if rng.random() < 0.3:
        im = im.resize((32, 32), Image.BILINEAR).resize((SIZE, SIZE), Image.BILINEAR)
    if rng.random() < 0.3:
        im = im.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.2))))
    return np.asarray(im)


def scene_frame(sprite: Image.Image, rng, size: int = 32) -> np.ndarray:
    """One frame of a training clip of the video scene (a random motion, frame, sprite edge, anchor and background),
    as data.render_clip draws them: uint8 [size, size, 3]."""
    motion = MOTIONS[int(rng.integers(len(MOTIONS)))]
    edge, cx, cy = data.sprite_placement(rng, size)
    bg = list(BACKGROUNDS.values())[int(rng.integers(len(BACKGROUNDS)))]
    return place(sprite, pose(motion, int(rng.integers(8)) / 7, edge, cx, cy, size), bg, size)


def scene_frames(sprites: list, per_sprite: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """per_sprite scene frames of each (sprite, subject) -> (uint8 [N, 32, 32, 3], subjects [N])."""
    rng = np.random.default_rng(seed)
    frames = [scene_frame(sp, rng) for sp, _ in sprites for _ in range(per_sprite)]
    return np.stack(frames), np.repeat([s for _, s in sprites], per_sprite)


def vq_reconstructions(images: np.ndarray, tokenizer: str = "emoji-vq", batch: int = 64) -> np.ndarray:
    """images uint8 [N, H, W, 3] through a bundled tokenizer and back (emoji-vq: what emoji-image can draw at best;
    emoji-vq-video, on 32-pixel frames: what emoji-video can)."""
    from mmspec.tokenizers import VQTokenizer
    vq = VQTokenizer.from_pretrained(common.ROOT / "models" / tokenizer)
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


def cached_reconstructions(work: Path, name: str, images: np.ndarray, tokenizer: str) -> np.ndarray:
    """vq_reconstructions, kept in the work folder under the tokenizer's weights' hash."""
    path = work / f"{name}_{common.vq_hash(common.ROOT / 'models' / tokenizer)}.npy"
    if not path.exists():
        np.save(path, vq_reconstructions(images, tokenizer))
    return np.load(path)


def main():
    from safetensors.torch import save_file
    p = common.base_parser("classifier", minutes=9, lr=2e-3, batch=96)
    p.set_defaults(work=str(WORK))
    args = p.parse_args()
    device = common.setup(args)
    images, test, meta = data.load_staged(per_image=48)  # (48 stagings of each image at random)
    subjects = np.array([m["subject"] for m in meta])
    recon = cached_reconstructions(Path(args.work), "vq_reconstructions", images, "emoji-vq")
    sprites = [(data.load_rgba(r["file"]), r["subject"]) for r in data.subject_records()]
    frames, frame_subjects = scene_frames(sprites, per_sprite=48, seed=1)
    frames_vq = cached_reconstructions(Path(args.work), "scene_frames_48_1", frames, "emoji-vq-video")
    test_frames, test_subjects = scene_frames(sprites, per_sprite=4, seed=2)  # fresh poses, never trained on
    test_frames_vq = cached_reconstructions(Path(args.work), "scene_frames_4_2", test_frames, "emoji-vq-video")
    model = SubjectNet(len(data.IMAGE_SUBJECTS)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    run = common.Run(args, model, opt)
    rng = np.random.default_rng(args.seed + run.step)
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    lr = common.lr_at(args, run.step, run.elapsed)
    model.train()
    while not run.done and not args.export_only:
        run.set_lr(lr)
        third = args.batch // 3
        picks = rng.integers(len(sprites), size=third)
        fresh = np.stack([random_staging(sprites[i][0], rng) for i in picks])
        idx = tr[rng.integers(len(tr), size=third)]
        fr = rng.integers(len(frames), size=args.batch - 2 * third)
        x = torch.cat([to_batch(fresh), to_batch(recon[idx]), to_batch(frames_vq[fr])])
        y = torch.from_numpy(np.concatenate([[sprites[i][1] for i in picks], subjects[idx], frame_subjects[fr]]))
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
           "scene_frames_pixels": float((predict(model, test_frames) == test_subjects).mean()),
           "scene_frames_emoji_vq_video": float((predict(model, test_frames_vq) == test_subjects).mean()),
           "steps": run.step, "train_minutes": round(run.elapsed / 60, 1), "subjects": len(data.IMAGE_SUBJECTS)}
    common.write_json(Path(args.work) / "metrics.json", acc)
    print(json.dumps(acc), flush=True)


if __name__ == "__main__":
    main()
