"""Does a video model move its first frame the way the prompt says, and keep it sharp? The figures of its card.

    python models/recipes/eval_video.py models/emoji-video            # print
    python models/recipes/eval_video.py models/emoji-video --write    # and add them to its metrics.json

Clips are generated the way users get them (`VideoPipeline`, text -> image -> video, the model's default
sampling, plain AR's law), for 8 motions x 4 subjects x 2 samples, seed 0.
- **PSNR to the ideal clip**: the ideal clip moves frame 0's sprite (the image model's picture) exactly as the
  training clips move theirs (`mmspec/pipelines/scene.py`). Beside it, the same measure for frame 0 held
  still (a model that only copies frame 0 scores that) and for the ideal clip through the frame tokenizer, frame
  by frame (`tokenizer_ceiling_db`: a model that generated the ideal clip's own codes would score that).
- **Motion shown**: the foreground (pixels far from the frame's border colour) is tracked from frame 0 to
  frame 7; a slide must move its centroid 3+ pixels the named way, a zoom scale its area by 1.3 (in) or
  1/1.3 (out), a bounce lift it 3+ pixels, and the foreground must last (a quarter of its area; zoom out:
  a twentieth). Control: the opposite motion judged on the same clips (what a direction-blind model gets).
  On 400 held-out training clips the check passes 1.00 (zoom out 0.98).
- **Subject named**: the share of clips whose frame 7 (and, beside it, frame 0) the subject classifier
  (`classifier.py`, trained on the art) names as the prompt's subject; skipped when it is not trained. Beside it,
  the share for the ideal clips' frames 7 through the frame tokenizer (what a model that generated their codes would
  score), and for the ideal clips' own frames 7, by motion.
All at the model's default sampling and again without its classifier-free guidance (`no_cfg`: the same seeds and
first frames), which shows what guidance adds.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

MOTIONS = ["slide left", "slide right", "slide up", "slide down", "zoom in", "zoom out", "bounce", "rotate"]
SUBJECTS = ["red apple", "dog face", "rocket", "pizza"]
OPPOSITE = {"slide left": "slide right", "slide right": "slide left", "slide up": "slide down",
            "slide down": "slide up", "zoom in": "zoom out", "zoom out": "zoom in"}


def track(frames: np.ndarray) -> np.ndarray:
    """uint8 [T, H, W, 3] -> [T, 3]: foreground centroid x, y and area per frame."""
    out = []
    for f in frames.astype(int):
        border = np.concatenate([f[0], f[-1], f[:, 0], f[:, -1]])
        mask = np.abs(f - np.median(border, 0)).sum(-1) > 90
        ys, xs = np.nonzero(mask)
        out.append((xs.mean() if len(xs) else np.nan, ys.mean() if len(ys) else np.nan, mask.sum()))
    return np.array(out)


def shown(motion: str, t: np.ndarray) -> "bool | None":
    """Whether the track t shows the motion (None: nothing in frame 0 to follow, or a motion not judged)."""
    x, y, a = t[:, 0], t[:, 1], t[:, 2]
    if a[0] < 8 or motion == "rotate":
        return None
    lasts = a[-1] > (0.05 if motion == "zoom out" else 0.25) * a[0]  # zoom out ends at a tenth of the area
    moved = {"slide left": x[-1] - x[0] < -3, "slide right": x[-1] - x[0] > 3, "slide up": y[-1] - y[0] < -3,
             "slide down": y[-1] - y[0] > 3, "zoom in": a[-1] > 1.3 * a[0], "zoom out": a[-1] < a[0] / 1.3,
             "bounce": np.nanmin(y[1:]) < y[0] - 3}[motion]
    return bool(moved and lasts)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """In dB, at most 48.13 (a mean squared error of one level): frames of the ideal clip that have not moved yet would
    otherwise score ~100 dB each and swamp a mean over frames."""
    return float(10 * np.log10(255.0 ** 2 / max(((a.astype(float) - b.astype(float)) ** 2).mean(), 1.0)))


def figures(folder: Path, device: str = "cpu") -> dict:
    """The card's figures at the model's default sampling and, beside them, without its classifier-free guidance."""
    from mmspec.pipelines import VideoPipeline

    os.environ["MMSPEC_WINDOW_CACHE"] = "off"
    pipe = VideoPipeline.from_pretrained(folder, device=device)
    rows = [f"{m} {s}" for m in MOTIONS for s in SUBJECTS for _ in range(2)]
    pictures = pipe._render_first_frames(rows, seed=0, progress_bar=False)
    default = dict(pipe.default_sampling)
    result = clip_figures(pipe, rows, pictures, default) | tokenizer_ceiling(pipe, rows, pictures)
    if default.get("cfg_scale", 1.0) != 1.0:
        plain = {k: v for k, v in default.items() if k != "cfg_scale"}
        result["no_cfg"] = {k: v for k, v in clip_figures(pipe, rows, pictures, plain).items()
                            if k in ("psnr_to_ideal_db", "psnr_to_ideal_frame7_db", "motion_shown", "subject_named_frame7")}
    return {"sampling": default} | result


def ideal_clip(pipe, row: str, picture) -> list[np.ndarray]:
    """The clip the row's motion makes of frame 0's picture, as the training clips were made: uint8 [H, W, 3] frames."""
    from mmspec.pipelines.scene import BACKGROUNDS, cut_out, parse, place, pose, staged_edge_and_anchor

    size, t = pipe.layout.w * pipe.tokenizer.downsample, pipe.layout.t
    edge, anchor = staged_edge_and_anchor(size)  # where scene.first_frame puts it
    motion, colour, _ = parse(row)
    sprite = cut_out(picture)
    return [place(sprite, pose(motion, i / (t - 1), edge, anchor, anchor, size), BACKGROUNDS[colour or "white"], size)
            for i in range(t)]


def tokenizer_ceiling(pipe, rows: list[str], pictures) -> dict:
    """PSNR of the ideal clips' frames 1-7 through the frame tokenizer (encode, decode), overall and at frame 7."""
    from PIL import Image

    ceiling, last, last_decoded = [], [], []
    for row, picture in zip(rows, pictures.images):
        ideal = ideal_clip(pipe, row, picture)[1:]
        decoded = [np.asarray(d.convert("RGB")) for d in
                   pipe.tokenizer.decode_pil(pipe.tokenizer.encode([Image.fromarray(f) for f in ideal]))]
        ceiling.append([psnr(d, f) for d, f in zip(decoded, ideal)])
        last.append(ideal[-1])
        last_decoded.append(decoded[-1])
    out = {"tokenizer_ceiling_db": round(float(np.mean(ceiling)), 2),
           "tokenizer_ceiling_frame7_db": round(float(np.mean([c[-1] for c in ceiling])), 2)}
    if classifier_trained():  # the subject named in those frames 7, and in the ideal clips' own (by motion)
        out["tokenizer_ceiling_subject_named_frame7"] = round(float(
            named_by_classifier(rows, np.stack(last_decoded)).mean()), 2)
        hit = named_by_classifier(rows, np.stack(last))
        out["ideal_subject_named_frame7"] = round(float(hit.mean()), 2)
        out["ideal_subject_named_frame7_per_motion"] = by_motion(rows, hit)
    return out


def clip_figures(pipe, rows: list[str], pictures, sampling: dict) -> dict:
    from mmspec.pipelines.scene import parse

    out = pipe(rows, seed=0, method="ar", image=pictures, sampling=sampling, progress_bar=False)
    gen, still, first, show, control = [], [], [], {m: [] for m in MOTIONS}, []
    per_motion = {m: [] for m in MOTIONS}
    for row, picture, frames in zip(rows, pictures.images, out.videos):
        motion = parse(row)[0]
        ideal = ideal_clip(pipe, row, picture)
        clip = np.stack([np.asarray(f.convert("RGB")) for f in frames])
        first.append(psnr(clip[0], ideal[0]))  # what the tokenizer keeps of the staged frame 0
        gen.append([psnr(c, i) for c, i in zip(clip[1:], ideal[1:])])
        per_motion[motion].append(np.mean(gen[-1]))
        still.append([psnr(ideal[0], i) for i in ideal[1:]])
        track_ = track(clip)
        if (s := shown(motion, track_)) is not None:
            show[motion].append(s)
            if motion in OPPOSITE:
                control.append(shown(OPPOSITE[motion], track_))
    judged = [s for v in show.values() for s in v]
    named = subject_named(rows, out.videos)
    return named | {"clips": len(rows), "psnr_to_ideal_db": round(float(np.mean(gen)), 2),
            "psnr_still_frame0_db": round(float(np.mean(still)), 2),
            "psnr_to_ideal_frame7_db": round(float(np.mean([g[-1] for g in gen])), 2),
            "psnr_frame0_db": round(float(np.mean(first)), 2),
            "psnr_to_ideal_per_motion_db": {m: round(float(np.mean(v)), 2) for m, v in per_motion.items()},
            "motion_shown": round(float(np.mean(judged)), 2), "motion_judged": len(judged),
            "motion_shown_control": round(float(np.mean(control)), 2),
            "motion_shown_per_motion": {m: round(float(np.mean(v)), 2) for m, v in show.items() if v}}


def subject_named(rows: list[str], videos) -> dict:
    """Share of clips whose frame 0 and frame 7 the classifier names as the row's subject, and frame 7's by motion
    ({} without a classifier)."""
    if not classifier_trained():
        return {}
    hit = {i: named_by_classifier(rows, np.stack([np.asarray(v[i].convert("RGB")) for v in videos]))
           for i in (0, len(videos[0]) - 1)}
    return {f"subject_named_frame{i}": round(float(h.mean()), 2) for i, h in hit.items()} | {
        "subject_named_frame7_per_motion": by_motion(rows, hit[len(videos[0]) - 1])}


def by_motion(rows: list[str], hit: np.ndarray) -> dict:
    """bool [N], one per row -> the share that hit for each motion."""
    from mmspec.pipelines.scene import parse

    return {m: round(float(hit[[parse(r)[0] == m for r in rows]].mean()), 2) for m in MOTIONS}


def classifier_trained() -> bool:
    import classifier
    return (classifier.WORK / "model.safetensors").exists()


def named_by_classifier(rows: list[str], frames: np.ndarray) -> np.ndarray:
    """uint8 [N, H, W, 3], one frame per row -> bool [N]: the classifier names the row's subject."""
    import classifier
    import data
    from mmspec.pipelines.scene import parse

    subjects = np.array([data.IMAGE_SUBJECTS.index(parse(r)[2]) for r in rows])
    return classifier.predict(loaded_classifier(), frames) == subjects


@functools.cache
def loaded_classifier():
    """The classifier, loaded once per evaluation (it names frames of several clip sets)."""
    import classifier
    return classifier.load()


def main():
    import torch

    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    result = figures(folder)
    print(json.dumps(result, indent=2))
    if "--write" in sys.argv[2:]:
        common.add_metrics(folder, "motion", result)


if __name__ == "__main__":
    main()
