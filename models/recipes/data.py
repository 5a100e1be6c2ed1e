"""Data for the bundled models: emoji images, emoji sprite videos, Python stdlib source.

Nothing here is committed: raw downloads and built arrays live in `.cache/` (gitignored).

    python models/recipes/data.py            # fetch the emoji art (npm pack) and build every dataset

Sources
- `emoji-datasource-google` (Noto Emoji art, Apache-2.0) and `emoji-datasource-twitter` (Twemoji art,
  CC-BY-4.0, (c) Twitter, Inc and other contributors), fetched with `npm pack`; we use the 64x64 PNGs
  in `img/<set>/64/` and `emoji.json` (names, short names, category, skin-tone variants).
- `emojibase-data` (MIT, Miles Johnson): the CLDR English labels ("red heart" for U+2764, whose Unicode
  name in emoji.json is "HEAVY BLACK HEART"), put first in each emoji's prompt words.
- The Python standard library of the running interpreter (`sysconfig.get_paths()["stdlib"]`, PSF licence).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from mmspec.pipelines.prompts import PAD_WORD, UNKNOWN_WORD, words
from mmspec.pipelines.scene import BACKGROUNDS, MOTIONS, SPRITE_EDGES, STEP, on_grid, place, pose

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("MMSPEC_CACHE", ROOT / ".cache"))
EMOJI_SETS = {"google": "emoji-datasource-google", "twitter": "emoji-datasource-twitter"}
EMOJI_VERSION = "16.0.0"
EMOJIBASE = ("emojibase-data", "17.0.0")
SKIN_TONES = {"1F3FB": "light skin tone", "1F3FC": "medium light skin tone", "1F3FD": "medium skin tone",
              "1F3FE": "medium dark skin tone", "1F3FF": "dark skin tone"}
HELD_OUT_PERCENT = 5


# ----------------------------------------------------------------------------------------------- words

def dedupe(ws):
    seen, out = set(), []
    for w in ws:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


# emoji.json subcategories of the everyday subjects people name in a prompt (faces, hearts, animals, plants,
# food and drink, vehicles, weather, sport and games): ~650 emoji, few enough for a small model to learn each
SUBJECT_PREFIXES = ("face-", "animal-", "plant-", "food-")
SUBJECTS = {"cat-face", "monkey-face", "heart", "drink", "transport-ground", "transport-air", "transport-water",
            "sky & weather", "sport", "game", "event", "musical-instrument", "award-medal"}


def subject_codes(art: str = "google") -> set[str]:
    """Base code points of the everyday subjects (SUBJECTS), from the art set's emoji.json."""
    return {e["unified"] for e in json.load(open(CACHE / "emoji" / art / "emoji.json"))
            if e["subcategory"].startswith(SUBJECT_PREFIXES) or e["subcategory"] in SUBJECTS}


def held_out(key: str) -> bool:
    """Deterministic ~5% split by emoji code point (the same emoji is held out in both art sets)."""
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100 < HELD_OUT_PERCENT


# ----------------------------------------------------------------------------------------------- emoji

def fetch_emoji() -> Path:
    """npm pack both emoji-datasource packages into .cache/emoji/ and extract the 64x64 PNGs + emoji.json."""
    out = CACHE / "emoji"
    out.mkdir(parents=True, exist_ok=True)
    for art, pkg in EMOJI_SETS.items():
        tgz = out / f"{pkg}-{EMOJI_VERSION}.tgz"
        if not tgz.exists():
            subprocess.run(["npm", "pack", f"{pkg}@{EMOJI_VERSION}", "--silent"], cwd=out, check=True)
        dest = out / art
        if not (dest / "emoji.json").exists():
            dest.mkdir(exist_ok=True)
            prefix = f"package/img/{art}/64/"
            with tarfile.open(tgz) as tf:
                for m in tf.getmembers():
                    if m.name.startswith(prefix) and m.name.endswith(".png"):
                        (dest / "64").mkdir(exist_ok=True)
                        (dest / "64" / Path(m.name).name).write_bytes(tf.extractfile(m).read())
                    elif m.name in ("package/emoji.json", "package/LICENSE"):
                        (dest / Path(m.name).name).write_bytes(tf.extractfile(m).read())
    pkg, version = EMOJIBASE
    tgz = out / f"{pkg}-{version}.tgz"
    if not tgz.exists():
        subprocess.run(["npm", "pack", f"{pkg}@{version}", "--silent"], cwd=out, check=True)
    if not (out / "emojibase" / "data.json").exists():
        (out / "emojibase").mkdir(exist_ok=True)
        with tarfile.open(tgz) as tf:
            for name in ("package/en/data.json", "package/LICENSE"):
                (out / "emojibase" / Path(name).name).write_bytes(tf.extractfile(name).read())
    return out


def _hex_key(code: str) -> str:
    return code.upper().replace("-FE0F", "")


def cldr_labels() -> dict[str, str]:
    """Code point sequence (without FE0F) -> CLDR English label, skin-tone variants included."""
    labels = {}
    for e in json.load(open(CACHE / "emoji" / "emojibase" / "data.json")):
        labels[_hex_key(e["hexcode"])] = e["label"]
        for s in e.get("skins") or []:
            labels[_hex_key(s["hexcode"])] = s["label"]
    return labels


def emoji_records(art: str) -> list[dict]:
    """One record per image of an art set: file, code, prompt words, category; skin-tone variants included."""
    root = CACHE / "emoji" / art
    labels = cldr_labels()
    recs = []
    for e in json.load(open(root / "emoji.json")):
        base = words(e["name"] or "") + [w for s in e["short_names"] for w in words(s)]
        label = labels.get(_hex_key(e["unified"]), (e["name"] or e["short_name"]).lower())
        cat = words(e["category"])
        variants = [(e["unified"], e["image"], e.get(f"has_img_{art}", True), [])]
        for tone, v in (e.get("skin_variations") or {}).items():
            tone_words = [w for t in tone.split("-") for w in words(SKIN_TONES.get(t, ""))]
            variants.append((v["unified"], v["image"], v.get(f"has_img_{art}", True), tone_words))
        for code, image, has, tone_words in variants:
            if has and (root / "64" / image).exists():
                recs.append({"art": art, "code": code, "base": e["unified"], "file": str(root / "64" / image),
                             "name": (e["name"] or e["short_name"]).lower(), "label": label,
                             "category": e["category"], "vocab_words": dedupe(base + tone_words + cat),
                             "words": dedupe(words(label) + base + tone_words + cat), "tone": bool(tone_words)})
    return recs


def load_rgba(path: str, size: int = 64) -> Image.Image:
    im = Image.open(path).convert("RGBA")
    if im.size != (size, size):
        im = im.resize((size, size), Image.LANCZOS)
    return im


def on_background(im: Image.Image, rgb=(255, 255, 255)) -> np.ndarray:
    bg = Image.new("RGBA", im.size, rgb + (255,))
    return np.asarray(Image.alpha_composite(bg, im).convert("RGB"))


def build_images() -> Path:
    """.cache/data/emoji_images.npz: images uint8 [N,64,64,3] on white, alpha [N,64,64], words, split, metadata."""
    path = CACHE / "data" / "emoji_images.npz"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = emoji_records("google") + emoji_records("twitter")
    rgba = [load_rgba(r["file"]) for r in recs]
    imgs = np.stack([on_background(im) for im in rgba])
    alpha = np.stack([np.asarray(im)[..., 3] for im in rgba])
    meta = [{k: r[k] for k in ("art", "code", "base", "name", "label", "category", "vocab_words", "words", "tone")}
            for r in recs]
    test = np.array([held_out(r["base"]) for r in recs])
    np.savez(path, images=imgs, alpha=alpha, test=test, meta=np.array(json.dumps(meta)))
    print(f"emoji images: {len(recs)} ({test.sum()} held out) -> {path}")
    return path


def load_images(with_alpha: bool = False):
    z = np.load(build_images())
    out = (z["images"], z["test"], json.loads(str(z["meta"])))
    return out + (z["alpha"],) if with_alpha else out


# ----------------------------------------------------------------------------------------------- staged images

# emoji-image's subjects: CLDR labels of everyday things people name in a prompt, drawn in both art sets; few
# enough that a 3.5M model learns to draw each one at every staging on this CPU
IMAGE_SUBJECTS = [
    "red heart", "smiling face", "dog face", "pizza", "rocket", "sun", "evergreen tree", "red apple", "cat face",
    "grinning face", "penguin", "fire", "star", "rainbow", "green apple", "banana", "soccer ball", "racing car",
    "snowman", "ghost", "robot", "unicorn", "panda", "guitar", "birthday cake", "face with tears of joy",
    "smiling face with heart-eyes", "winking face", "thinking face", "alien", "skull", "blue heart", "green heart",
    "yellow heart", "purple heart", "broken heart", "monkey face", "tiger face", "horse face", "cow face",
    "pig face", "mouse face", "rabbit face", "fox", "bear", "koala", "frog", "chicken", "bird", "turtle", "snake",
    "dolphin", "whale", "octopus", "butterfly", "rose", "sunflower", "cactus", "palm tree", "maple leaf",
    "mushroom", "grapes", "watermelon", "lemon", "strawberry", "cherries", "pineapple", "carrot", "avocado",
    "hamburger", "french fries", "hot dog", "taco", "doughnut", "ice cream", "hot beverage", "automobile", "bus",
    "bicycle", "airplane", "ship", "cloud", "snowflake", "high voltage", "crescent moon", "basketball",
    "american football", "trophy", "video game", "balloon", "wrapped gift", "musical note", "drum", "trumpet",
    "crown", "light bulb"]
# a staging: the emoji's edge on the 64-pixel canvas and its corner, all in whole 4-pixel emoji-vq tokens, so one
# emoji staged anywhere is (nearly) the same tokens shifted: the model learns a subject once, not per place
STAGE_CANVAS, STAGE_STEP, STAGE_EDGES = 64, 4, (32, 40, 48, 56, 64)
HELD_OUT_STAGING_PERCENT = 15


def placements(edge: int) -> list[tuple[int, int, int]]:
    """Every (edge, x, y) with the emoji inside the canvas, corners on the token grid."""
    xs = range(0, STAGE_CANVAS - edge + 1, STAGE_STEP)
    return [(edge, x, y) for y in xs for x in xs]


def held_out_staging(edge: int, x: int, y: int) -> bool:
    """~15% of the placements of each edge below full size, the same for every subject, are never trained on."""
    h = int(hashlib.sha1(f"{edge},{x},{y}".encode()).hexdigest(), 16) % 100
    return edge < STAGE_CANVAS and h < HELD_OUT_STAGING_PERCENT


def stage(sprite: Image.Image, edge: int, x: int, y: int) -> np.ndarray:
    """An RGBA emoji at edge pixels with its corner at (x, y) on the white canvas -> uint8 [64, 64, 3]."""
    canvas = Image.new("RGBA", (STAGE_CANVAS, STAGE_CANVAS), (255, 255, 255, 255))
    canvas.alpha_composite(sprite.resize((edge, edge), Image.LANCZOS), (x, y))
    return np.asarray(canvas.convert("RGB"))


def subject_records() -> list[dict]:
    """The IMAGE_SUBJECTS' base emoji (no skin tones) in both art sets, each with its subject index."""
    index = {s: i for i, s in enumerate(IMAGE_SUBJECTS)}
    recs = [dict(r, subject=index[r["label"]]) for r in emoji_records("google") + emoji_records("twitter")
            if not r["tone"] and r["label"] in index]
    assert len(recs) == 2 * len(IMAGE_SUBJECTS), "every subject in both art sets"
    return recs


def build_staged_images(per_image: int | None = None, held_per_image: int = 4, seed: int = 0) -> Path:
    """.cache/data/emoji_staged_*.npz: images uint8 [N,64,64,3] on white, each an IMAGE_SUBJECTS emoji staged (an edge
    of STAGE_EDGES, a placement); `test` marks the held-out placements. `per_image` None: every training placement of
    every image once (what emoji-image trains on; `staging_weights` gives each edge the same share), else that many
    at random (edge first, uniform over STAGE_EDGES, then a placement); `held_per_image` held-out ones at random."""
    path = CACHE / "data" / f"emoji_staged_{per_image or 'all'}_{held_per_image}.npz"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pools = {split: {e: [p for p in placements(e) if held_out_staging(*p) == split] for e in STAGE_EDGES}
             for split in (False, True)}
    imgs, test, meta = [], [], []
    for r in subject_records():
        sprite = load_rgba(r["file"])
        for split, n in ((False, per_image), (True, held_per_image)):
            edges = [e for e in STAGE_EDGES if pools[split][e]]
            if n is None:
                chosen = [p for e in edges for p in pools[split][e]]
            else:
                chosen = []
                for _ in range(n):
                    pool = pools[split][edges[int(rng.integers(len(edges)))]]
                    chosen.append(pool[int(rng.integers(len(pool)))])
            for e, x, y in chosen:
                imgs.append(stage(sprite, e, x, y))
                test.append(split)
                meta.append({k: r[k] for k in ("art", "code", "base", "label", "words", "subject")} | {
                    "edge": e, "x": x, "y": y})
    np.savez(path, images=np.stack(imgs), test=np.array(test), meta=np.array(json.dumps(meta)))
    print(f"staged emoji: {len(imgs)} ({sum(test)} at held-out placements) -> {path}")
    return path


def load_staged(per_image: int | None = None):
    z = np.load(build_staged_images(per_image))
    return z["images"], z["test"], json.loads(str(z["meta"]))


def staging_weights(meta: list[dict]) -> np.ndarray:
    """[N] sampling weights of staged images that give every edge the same share of the draws (there are 81
    placements of a 32-pixel emoji and one of a 64-pixel one), summing to 1."""
    edges = np.array([m["edge"] for m in meta])
    values, counts = np.unique(edges, return_counts=True)
    w = 1.0 / counts[np.searchsorted(values, edges)]
    return w / w.sum()


# ----------------------------------------------------------------------------------------------- vocab

def build_vocab(meta: list[dict]) -> list[str]:
    """Word vocabulary shared by the image and video models: id 0 = <pad> (null condition), 1 = <unk>.

    Built from emoji.json's names, short names and categories (plus motions and colours); CLDR label
    words outside it (a few hundred, e.g. "grinning" is in, "beaming" is not) map to <unk>."""
    ws = sorted({w for m in meta for w in m["vocab_words"]} | {w for mo in MOTIONS for w in words(mo)}
                | {w for b in BACKGROUNDS for w in words(b)} | {"background"})
    return [PAD_WORD, UNKNOWN_WORD] + ws


# ----------------------------------------------------------------------------------------------- video

def sprite_placement(rng, size: int = 32) -> tuple[int, int, int]:
    """A clip's random sprite edge in pixels and its anchor corner (x, y) on the patch grid."""
    s = int(rng.integers(SPRITE_EDGES[0], SPRITE_EDGES[1] + 1))
    cx, cy = STEP * rng.integers(0, on_grid(size - s) // STEP + 1, size=2)
    return s, cx, cy


def render_clip(sprite: Image.Image, motion: str, bg, frames: int = 8, size: int = 32, rng=None) -> np.ndarray:
    """A sprite (RGBA, any size) moving on a plain background: uint8 [frames, size, size, 3]."""
    rng = rng or np.random.default_rng(0)
    s, cx, cy = sprite_placement(rng, size)
    return np.stack([place(sprite, pose(motion, t / (frames - 1), s, cx, cy, size), bg, size) for t in range(frames)])


def video_caption(name_words: list[str], motion: str, bg_name: str) -> list[str]:
    """Caption words: motion first (so it survives truncation), then the emoji name, then the background."""
    return words(motion) + name_words + [bg_name, "background"]


def build_videos(n_clips: int = 6000, seed: int = 0) -> Path:
    """.cache/data/emoji_videos.npz: clips uint8 [N,8,32,32,3] and captions (word lists), split by emoji."""
    path = CACHE / "data" / f"emoji_videos_step{STEP}_{n_clips}.npz"  # the scene's patch step: its clips differ
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = [r for r in emoji_records("google") + emoji_records("twitter") if not r["tone"]]  # base emoji only
    rng = np.random.default_rng(seed)
    bgs = list(BACKGROUNDS)
    clips, caps, test = [], [], []
    sprites = {}
    for i in range(n_clips):
        r = recs[int(rng.integers(len(recs)))]
        if r["file"] not in sprites:
            sprites[r["file"]] = load_rgba(r["file"])
        motion = MOTIONS[int(rng.integers(len(MOTIONS)))]
        bg = bgs[int(rng.integers(len(bgs)))]
        clips.append(render_clip(sprites[r["file"]], motion, BACKGROUNDS[bg], rng=rng))
        caps.append({"words": video_caption(words(r["label"]), motion, bg), "motion": motion, "name": r["label"],
                     "background": bg, "art": r["art"], "code": r["code"]})
        test.append(held_out(r["base"]))
    np.savez(path, clips=np.stack(clips), test=np.array(test), meta=np.array(json.dumps(caps)))
    print(f"emoji videos: {n_clips} clips ({sum(test)} held out) -> {path}")
    return path


def load_videos(n_clips: int = 6000):
    z = np.load(build_videos(n_clips))
    meta = json.loads(str(z["meta"]))
    labels = cldr_labels()
    for m in meta:  # captions from the CLDR label (also for arrays built before labels were added)
        m["name"] = labels.get(_hex_key(m["code"]), m["name"])
        m["words"] = video_caption(words(m["name"]), m["motion"], m["background"])
    return z["clips"], z["test"], meta


# ----------------------------------------------------------------------------------------------- text

def stdlib_files() -> list[Path]:
    """Python files of the running interpreter's standard library, without tests and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3", "turtledemo", "dist-packages"}
    files = [p for p in sorted(root.rglob("*.py")) if not (set(p.relative_to(root).parts[:-1]) & skip)]
    return files


def build_text(vocab_size: int = 4096) -> Path:
    """.cache/data/stdlib/: tokenizer.json (byte-level BPE), train.bin / test.bin (uint16 ids, files joined by EOS)."""
    from tokenizers import ByteLevelBPETokenizer

    out = CACHE / "data" / "stdlib"
    if (out / "train.bin").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace") for p in files}
    train_keys = [k for k in texts if not held_out(k)]
    test_keys = [k for k in texts if held_out(k)]
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator((texts[k] for k in train_keys), vocab_size=vocab_size, min_frequency=2,
                            special_tokens=["<|endoftext|>"])
    tok.save(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    for split, keys in (("train", train_keys), ("test", test_keys)):
        ids = []
        for enc in tok.encode_batch([texts[k] for k in keys]):
            ids.extend(enc.ids + [eos])
        np.array(ids, dtype=np.uint16).tofile(out / f"{split}.bin")
        print(f"stdlib {split}: {len(keys)} files, {len(ids)} tokens")
    (out / "files.json").write_text(json.dumps({"python": sys.version, "root": str(root), "train": train_keys,
                                                "test": test_keys}))
    return out


if __name__ == "__main__":
    fetch_emoji()
    build_images()
    build_staged_images()
    build_text()
    build_videos()
