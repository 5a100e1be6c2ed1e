"""Files a job gives its pipeline: `image` (a video's first frame, or the picture to inpaint) and `mask` (nonzero
where an image job regenerates), paths relative to the job file.

They are checked when the job loads, like every other key. An output's identity holds the sha256 of their bytes,
not their paths: another picture at the same path is another output, and a resumed job never takes one for the
other. The worker renders from the very bytes that were hashed, or fails the rows if the file changed meanwhile.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

INPUT_KEYS = ("image", "mask")
USES = {"image": "video jobs (the first frame) and image jobs (the picture to inpaint, with mask)",
        "mask": "image jobs (nonzero where to regenerate, with image)"}
KINDS = {"image": ("image", "video"), "mask": ("image",)}


class InputFiles:
    """Checks the input keys of the defaults and items of one job; each file is read and checked once."""

    def __init__(self, kind: str, model: str | None, base: Path, error: type, takes: tuple[str, ...]):
        """takes: the pictures the model's family takes (mmspec.families)."""
        self.kind, self.model, self.base, self.error, self.takes = kind, model, base, error, takes
        self.seen: dict[Path, str] = {}  # resolved path -> sha256 of its bytes

    def check(self, source: dict, label: str, whole: bool) -> dict:
        """The input keys of `source` -> {key: {"path": absolute path, "sha256": ...}}; `whole`: source is an
        item merged with the defaults, so keys that only work together must all be there."""
        files = {}
        for key in INPUT_KEYS:
            value = source.get(key)
            if value is None:  # null: none, also where the defaults give one
                continue
            if self.kind not in KINDS[key]:
                raise self.error(f"{label}{key}: a {self.kind} job takes no {key}; {key} is for {USES[key]}")
            if key not in self.takes:
                raise self.error(f"{label}{key}: the job's model generates from its prompts alone (no image or mask)")
            if not isinstance(value, str) or not value:
                raise self.error(f"{label}{key}: must be a path to an image file (relative to the job file), "
                                 f"got {value!r}")
            path = (self.base / value).resolve()
            if not path.is_file():
                raise self.error(f"{label}{key}: no file {value!r} (paths are relative to the job file)")
            if path not in self.seen:
                self.seen[path] = self._read(path, key, value, label)
            files[key] = {"path": str(path), "sha256": self.seen[path]}
        if whole and self.kind == "image" and len(files) == 1:
            key, other = ("image", "mask") if "image" in files else ("mask", "image")
            raise self.error(f"{label}{key}: inpainting needs both image (the picture) and mask (nonzero where to "
                             f"regenerate); {other} is missing")
        return files

    def _read(self, path: Path, key: str, value: str, label: str) -> str:
        """Open the file as the worker will, and check a mask against the model's token grid -> its sha256."""
        from mmspec.pipelines.grid import open_picture

        data = path.read_bytes()
        try:
            picture = open_picture(data, key, repr(value))
        except ValueError as err:
            raise self.error(f"{label}{key}: {err}") from None
        if key == "mask":
            from mmspec.pipelines import ImagePipeline
            from mmspec.pipelines.base import model_path
            from mmspec.pipelines.grid import model_layout, token_mask

            layout = model_layout(model_path(self.model, ImagePipeline.default_model))
            try:
                token_mask(picture, layout.h, layout.w)
            except ValueError as err:
                raise self.error(f"{label}mask: {err}") from None
        return hashlib.sha256(data).hexdigest()


def load_inputs(files: dict) -> dict:
    """{key: {path, sha256}} -> the pipeline's keyword arguments: PIL images of the bytes the output is named by."""
    from mmspec.pipelines.grid import open_picture

    call = {}
    for key, file in files.items():
        data = Path(file["path"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != file["sha256"]:
            raise ValueError(f"{key} file {file['path']} changed after the job was loaded; run the job again to "
                             "render outputs of the new file")
        call[key] = open_picture(data, key, file["path"])
    return call
