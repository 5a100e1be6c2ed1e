"""Does an emoji image model follow its prompt, vary with the seed, and generalise? The figures of its card.

    python models/recipes/eval_image.py models/emoji-image            # print
    python models/recipes/eval_image.py models/emoji-image --write    # and add them to its metrics.json

Needs the classifier (`python models/recipes/classifier.py`) and the staged data (data.py). Samples are drawn
the way users get them (`ImagePipeline`, plain AR's law, seed 0) for EVAL_PROMPTS: 40 of the model's subjects
in wordings it was not trained on, 4 samples each.
- **Variety**: two samples are visibly different when their mean absolute pixel difference is at least
  VISIBLY_DIFFERENT (of 255); a prompt varies when its 4 samples hold at least 3 pictures that are pairwise
  visibly different (greedy: a sample counts when it differs from every one counted before it). The threshold
  sits above what emoji-vq alone changes (a staged picture at a held-out placement against its reconstruction:
  median 2.5, 99th percentile 6.2) and below 95% of the differences between two stagings of one emoji (5th percentile 17.1).
- **Prompt followed**: the share of samples the classifier names as the prompt's subject, at the model's
  default sampling and at the same sampling without classifier-free guidance.
- **Held-out gap**: teacher-forced loss (nats/token) on staged pictures at placements never trained on,
  against the same on training placements.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import classifier  # noqa: E402
import common  # noqa: E402
import data  # noqa: E402

VISIBLY_DIFFERENT = 17.0
WORDINGS = ["{}", "{} emoji", "emoji of {}", "{} symbol"]
EVAL_PROMPTS = [(WORDINGS[i % 4].format(s), s) for i, s in enumerate(data.IMAGE_SUBJECTS[::2][:40])]


def distinct(images: np.ndarray, threshold: float = VISIBLY_DIFFERENT) -> int:
    """How many of the pictures (uint8 [n, H, W, 3]) are visibly different from every one counted before them."""
    kept = []
    for im in images.astype(np.float32):
        if all(np.abs(im - k).mean() >= threshold for k in kept):
            kept.append(im)
    return len(kept)


def without_cfg(sampling: dict) -> dict:
    return {k: v for k, v in sampling.items() if k != "cfg_scale"}


def prompt_figures(pipe, sampling: dict, per_prompt: int = 4) -> tuple[dict, np.ndarray]:
    out = pipe([p for p, _ in EVAL_PROMPTS], num_outputs=per_prompt, seed=0, method="ar", sampling=sampling)
    images = np.stack([np.asarray(im.convert("RGB")) for im in out.images])  # [40 * per_prompt, 64, 64, 3]
    subjects = np.repeat([data.IMAGE_SUBJECTS.index(s) for _, s in EVAL_PROMPTS], per_prompt)
    named = classifier.predict(classifier.load(), images) == subjects
    by_prompt = named.reshape(len(EVAL_PROMPTS), per_prompt)  # prompt i is worded WORDINGS[i % 4]
    wordings = {w: round(float(by_prompt[i::len(WORDINGS)].mean()), 3) for i, w in enumerate(WORDINGS)}
    return {"sampling": sampling} | scores(images, named, per_prompt) | {"named_by_wording": wordings}, images


def scores(images: np.ndarray, named: np.ndarray, per_prompt: int = 4) -> dict:
    """The figures of samples uint8 [prompts * per_prompt, H, W, 3] (prompt-major) and whether the classifier named
    each one's subject: variety counts every sample, and (stricter, since noise varies too) only the named ones."""
    spans = range(0, len(images), per_prompt)
    counts = [distinct(images[i:i + per_prompt]) for i in spans]
    named_counts = [distinct(images[i:i + per_prompt][named[i:i + per_prompt]]) for i in spans]
    return {"classifier_names_subject": round(float(named.mean()), 3),
            "prompts_with_3_of_4_different": round(float(np.mean([c >= 3 for c in counts])), 3),
            "mean_different_of_4": round(float(np.mean(counts)), 2),
            "prompts_with_3_of_4_different_named": round(float(np.mean([c >= 3 for c in named_counts])), 3)}


def loss_gap(folder: Path) -> dict:
    """Teacher-forced loss on staged pictures at held-out placements and at training placements (all of each,
    up to 768), with the model's prompt words."""
    import train_gpt
    config = json.loads((folder / "config.json").read_text())
    vq = (folder / config["tokenizer"]).resolve()
    toks, words, test = train_gpt.tokenize("emoji-image", vq)
    vocab = json.loads((folder / config["prompt_vocab"]).read_text())
    index = {w: i for i, w in enumerate(vocab)}
    model = train_gpt.load_bf16(folder, "cpu")
    positions = train_gpt.make_layout(train_gpt.MODELS["emoji-image"]["layout"]).positions()
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    tr = tr[:: max(1, len(tr) // len(te))]
    loss = {k: round(train_gpt.heldout_loss(model, toks[i], [words[j] for j in i], index, positions, "cpu"), 4)
            for k, i in (("heldout_placements", te), ("training_placements", tr))}
    return loss | {"ratio": round(loss["heldout_placements"] / loss["training_placements"], 2)}


def figures(folder: Path, sheet: "Path | None" = None) -> dict:
    from mmspec.pipelines import ImagePipeline
    pipe = ImagePipeline.from_pretrained(folder)
    default = dict(pipe.default_sampling)
    with_default, images = prompt_figures(pipe, default)
    result = {"prompts": len(EVAL_PROMPTS), "visibly_different_mean_abs_pixels": VISIBLY_DIFFERENT,
              "default": with_default, "loss": loss_gap(folder)}
    if default.get("cfg_scale", 1.0) != 1.0:
        result["no_cfg"] = prompt_figures(pipe, without_cfg(default))[0]
    else:  # a model sampled without guidance by default: what guidance would give
        result["cfg_3"] = prompt_figures(pipe, default | {"cfg_scale": 3.0})[0]
    if sheet is not None:
        from PIL import Image
        grid = Image.new("RGB", (8 * 64, 20 * 64), "white")
        for i, im in enumerate(images):
            grid.paste(Image.fromarray(im), ((i % 8) * 64, (i // 8) * 64))
        grid.save(sheet)
    return result


def main():
    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    sheet = Path(sys.argv[sys.argv.index("--sheet") + 1]) if "--sheet" in sys.argv else None
    result = figures(folder, sheet)
    print(json.dumps(result, indent=2))
    if "--write" in sys.argv[2:]:
        common.add_metrics(folder, "eval_image", result)


if __name__ == "__main__":
    main()
