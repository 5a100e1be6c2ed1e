"""Pictures and clips in and out of JSON: base64 in a request -> PIL image, PIL images -> base64 PNG, frames ->
base64 MP4. Nothing touches the file system: a request's picture is bytes, never a path."""
from __future__ import annotations

import base64
import binascii
import io

from mmspec.pipelines.grid import open_picture

MP4_FPS = 8  # the pipelines' VideoOutput.fps
MP4_SCALE = 4  # pixels a frame pixel (VideoOutput.scale): the bundled 32x32 frames are too small for a player


def picture(data: str, field: str):
    """A base64 picture (PNG, JPEG...; a data: URL's prefix allowed) -> the decoded PIL image, refused in one line
    naming the field when it is not one."""
    if data.startswith("data:"):
        data = data.partition(",")[2]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field} must be a base64-encoded PNG or JPEG") from None
    return open_picture(raw, field, source=field)


def png(image) -> str:
    """A PIL image -> base64 PNG (deterministic: the same image, the same bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def mp4(frames: list) -> str:
    """PIL frames [T] -> base64 MP4, each frame pixel MP4_SCALE pixels a side, at MP4_FPS."""
    import imageio.v3 as iio
    import numpy as np

    arr = np.stack([np.asarray(f.convert("RGB").resize((f.width * MP4_SCALE, f.height * MP4_SCALE), 0))
                    for f in frames])  # [T, H, W, 3] uint8
    return base64.b64encode(iio.imwrite("<bytes>", arr, extension=".mp4", fps=MP4_FPS)).decode()
