"""The emoji-motion scenes the bundled video model is trained on: a sprite moving on a plain background.

One definition serves both sides: the training recipe renders its clips with `pose` and `place`, and
the video pipeline composes a clip's first frame from an emoji-image output the same way (`first_frame`),
so a generated video starts from a frame like those the model learned to continue.
"""
from __future__ import annotations

import math
import re
from typing import Protocol

import numpy as np
from PIL import Image, ImageDraw

MOTIONS = ["slide left", "slide right", "slide up", "slide down", "bounce", "zoom in", "zoom out", "rotate"]
BACKGROUNDS = {"white": (255, 255, 255), "black": (0, 0, 0), "red": (220, 50, 50), "green": (60, 170, 80),
               "blue": (60, 100, 220), "yellow": (240, 210, 60), "purple": (140, 80, 190), "gray": (128, 128, 128),
               "orange": (240, 140, 40), "pink": (240, 150, 190), "sky": (150, 200, 240), "mint": (170, 230, 190)}
SPRITE_EDGES = (14, 20)  # sprite edge in pixels on a 32-pixel frame, inclusive
# The frame tokenizer's patch (emoji-vq-video, a patch VQ): slides and bounces move the sprite by whole patches from a
# corner on the patch grid, so every code of a later frame is a code of frame 0, moved (a copy the video model learns
# once, for every subject), instead of codes of a sprite shifted by a few pixels, which it would have to redraw.
STEP = 4


def on_grid(v: float) -> int:
    """A position in pixels -> the patch-grid position at or below it."""
    return STEP * int(v // STEP)


def pose(motion: str, f: float, edge: int, cx: int, cy: int, size: int) -> tuple[int, float, float, float]:
    """Where the sprite is at time f in [0, 1] -> (edge in pixels, rotation in degrees, x, y of its corner).
    (cx, cy) is the clip's random anchor (on the patch grid). Slides start at a side and bounce on the floor; both
    travel the same whole patches at the same frames for every sprite edge, so when a frame moves depends on the
    frame's index alone."""
    lo, hi = 0, on_grid(size - edge)
    span = min(hi, on_grid(size - SPRITE_EDGES[1]))  # how far slides travel and bounces lift
    scale, angle, x, y = 1.0, 0.0, float(cx), float(cy)
    if motion == "slide left":
        x = hi - on_grid(f * span)
    elif motion == "slide right":
        x = lo + on_grid(f * span)
    elif motion == "slide up":
        y = hi - on_grid(f * span)
    elif motion == "slide down":
        y = lo + on_grid(f * span)
    elif motion == "bounce":
        y = hi - on_grid(abs(math.sin(math.pi * 1.5 * f)) * span)
    elif motion == "zoom in":
        scale = 0.4 + 0.9 * f
    elif motion == "zoom out":
        scale = 1.3 - 0.9 * f
    elif motion == "rotate":
        angle = -360.0 * f * 7 / 8
    e = max(2, int(round(edge * scale)))
    if motion.startswith("zoom") or motion == "rotate":  # centred, nudged toward the anchor
        x, y = (size - e) / 2 + (cx - hi / 2) * 0.3, (size - e) / 2 + (cy - hi / 2) * 0.3
    return e, angle, x, y


def place(sprite: Image.Image, where: tuple[int, float, float, float], background, size: int) -> np.ndarray:
    """An RGBA sprite at a pose on a plain background -> uint8 [size, size, 3]."""
    e, angle, x, y = where
    sp = sprite.resize((e, e), Image.LANCZOS)
    if angle:
        sp = sp.rotate(angle, resample=Image.BICUBIC, expand=False)
    canvas = Image.new("RGBA", (size, size), tuple(background) + (255,))
    canvas.alpha_composite(sp, (int(round(x)), int(round(y))))
    return np.asarray(canvas.convert("RGB"))


def parse(prompt: str) -> tuple[str | None, str | None, str]:
    """'bounce red apple on green background' -> ('bounce', 'green', 'red apple'): the motion, the background
    colour (None when not named) and what is left, the subject."""
    text = " " + re.sub(r"[^a-z ]+", " ", prompt.lower()) + " "
    motion = next((m for m in sorted(MOTIONS, key=len, reverse=True) if f" {m} " in text), None)
    if motion is None and " zoom " in text:
        motion = "zoom in"
    if motion is not None:
        text = text.replace(f" {motion} ", " ", 1).replace(" zoom ", " ", 1)
    colour = None
    found = re.search(r" (\w+) background ", text)
    if found and found.group(1) in BACKGROUNDS:
        colour = found.group(1)
        text = text.replace(found.group(0), " ", 1)
    subject = " ".join(w for w in text.split() if w not in ("on", "a", "the", "background"))
    return motion, colour, subject


def cut_out(image: Image.Image, threshold: int = 40) -> Image.Image:
    """An emoji on a plain background (white, as emoji-image draws, or a picture of the user's on any plain colour) ->
    RGBA sprite: the pixels near a corner's colour and connected to that corner become transparent (white inside the
    emoji, such as eyes, stays), cut to the smallest square around the rest (emoji-image draws its subject at any size
    and place on the canvas; a clip's sprite fills its square, as the emoji art the video model trained on does)."""
    rgb = np.asarray(image.convert("RGB")).astype(np.int16)  # [H, W, 3]
    h, w, _ = rgb.shape
    outside = np.zeros((h, w), bool)
    for x, y in ((0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)):
        if outside[y, x]:
            continue
        near = np.abs(rgb - rgb[y, x]).max(-1) < threshold  # [H, W] near this corner's colour
        marks = Image.fromarray(np.where(near, 255, 0).astype(np.uint8)).copy()  # floodfill needs its own pixels
        ImageDraw.floodfill(marks, (x, y), 128)
        outside |= np.asarray(marks) == 128
    alpha = np.where(outside, 0, 255).astype(np.uint8)
    sprite = np.dstack([rgb.astype(np.uint8), alpha])  # [H, W, 4]
    ys, xs = np.nonzero(alpha)
    if len(ys):
        top, left, side = ys.min(), xs.min(), max(np.ptp(ys), np.ptp(xs)) + 1
        square = np.zeros((side, side, 4), np.uint8)  # transparent, the subject centred in it
        hy, wx = ys.max() + 1 - top, xs.max() + 1 - left
        oy, ox = (side - hy) // 2, (side - wx) // 2
        square[oy:oy + hy, ox:ox + wx] = sprite[top:top + hy, left:left + wx]
        sprite = square
    return Image.fromarray(sprite, "RGBA")


def staged_edge_and_anchor(size: int) -> tuple[int, int]:
    """The sprite edge and the anchor (on the patch grid, mid-frame) of a staged frame 0 on a size-pixel frame."""
    edge = sum(SPRITE_EDGES) // 2
    return edge, on_grid((size - edge) / 2)


def first_frame(image: Image.Image, motion: str | None, colour: str | None, size: int = 32) -> Image.Image:
    """An emoji image on a plain background (e.g. an emoji-image output) -> the first frame of a clip of that motion:
    the sprite at a mid-range edge, where the motion starts, with the clip's anchor in the middle of the frame."""
    edge, anchor = staged_edge_and_anchor(size)
    where = pose(motion or "", 0.0, edge, anchor, anchor, size)
    return Image.fromarray(place(cut_out(image), where, BACKGROUNDS[colour or "white"], size))


class Staging(Protocol):
    """How a video model wants a picture staged as its first frame, declared in its config.json
    (`first_frame_staging`): what the first-frame image model is asked for, and what its picture becomes."""

    def subject(self, prompt: str) -> str: ...

    def first_frame(self, picture: Image.Image, prompt: str, size: int) -> Image.Image: ...


class EmojiSprite:
    """The bundled emoji-video's scenes: the image model draws the subject the prompt names, and its emoji
    becomes a sprite where the named motion starts, on the named background colour."""

    def subject(self, prompt: str) -> str:
        return parse(prompt)[2] or prompt

    def first_frame(self, picture: Image.Image, prompt: str, size: int) -> Image.Image:
        motion, colour, _ = parse(prompt)
        return first_frame(picture, motion, colour, size=size)


STAGINGS = {"emoji-sprite": EmojiSprite}


def staging(name: str, config) -> Staging:
    if name not in STAGINGS:
        raise ValueError(f"{config}: first_frame_staging must be one of {sorted(STAGINGS)}, got {name!r}")
    return STAGINGS[name]()
