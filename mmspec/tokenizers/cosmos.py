"""Cosmos's discrete video tokenizer (DV8x16x16, DV4x8x8: FSQ levels 8,8,8,5,5,5, 64000 codes), from NVIDIA's
TorchScript files.

NVIDIA ships the tokenizer as TorchScript only (encoder.jit, decoder.jit): its modules (3D Haar wavelets, factorized
causal convolutions and attention) exist in no well-kept library, and rebuilding them to load the weights would be
a second implementation to keep in step with theirs. So mmspec runs the TorchScript files with `torch.jit.load`,
and only when asked to (`allow_torchscript=True`, the CLI's --allow-torchscript): a TorchScript file is code that
runs on this machine, as a pickle is.

The tokenizer is causal in time: latent frame 0 comes from pixel frame 0 alone, each later one from the next
`compression[0]` pixel frames, and rows and cols shrink by `compression[1:]`. A tokenizer folder holds config.json
({"model_type": "cosmos-discrete-video", "encoder": "encoder.jit", "decoder": "decoder.jit", "compression": [8, 16,
16], "vocab_size": 64000, "dtype": "bfloat16"}) and the two files.
"""
from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import torch

from mmspec.tokenizers.pixels import cosmos_pixels

MODEL_TYPE = "cosmos-discrete-video"
FILES = ("encoder.jit", "decoder.jit")


class DiscreteVideoTokenizer:
    def __init__(self, encoder, decoder, compression: tuple[int, int, int], vocab_size: int,
                 device="cpu", dtype: torch.dtype = torch.float32):
        self.encoder, self.decoder = encoder, decoder
        self.compression, self.vocab_size = tuple(compression), vocab_size
        self.device, self.dtype = torch.device(device), dtype

    @classmethod
    def from_pretrained(cls, path: "str | Path", allow_torchscript: bool = False, device="cpu",
                        dtype: "torch.dtype | None" = None) -> "DiscreteVideoTokenizer":
        """dtype: what the encoder runs in (None: the folder's, bf16 for NVIDIA's; on a CPU fp32)."""
        path = Path(path)
        config_file = path / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"no Cosmos video tokenizer at {path} (a folder with config.json, encoder.jit and "
                                    "decoder.jit; `mmspec convert cosmos ... --tokenizer DIR` writes one)")
        config = json.loads(config_file.read_text())
        if config.get("model_type") != MODEL_TYPE:
            raise ValueError(f"{config_file}: model_type must be {MODEL_TYPE!r}, got {config.get('model_type')!r}")
        files = [path / config.get(name, f"{name}.jit") for name in ("encoder", "decoder")]
        for file in files:
            if not file.is_file():
                raise FileNotFoundError(f"the Cosmos video tokenizer at {path} has no {file.name}")
        if not allow_torchscript:
            raise ValueError(f"{files[0]} and {files[1].name} are TorchScript, which is code that runs when loaded: "
                             "pass --allow-torchscript (allow_torchscript=True) if you trust where they come from")
        if dtype is None:
            dtype = getattr(torch, config.get("dtype", "float32")) if torch.device(device).type != "cpu" \
                else torch.float32
        with warnings.catch_warnings():  # torch deprecates TorchScript; NVIDIA's tokenizer exists in no other form
            warnings.simplefilter("ignore", FutureWarning)
            encoder, decoder = (torch.jit.load(str(f), map_location=device).eval().to(dtype) for f in files)
        return cls(encoder, decoder, config["compression"], config["vocab_size"], device, dtype)

    def frames(self, latent_frames: int) -> int:
        """Pixel frames that make `latent_frames` latent frames: one, then compression[0] per latent frame."""
        return 1 + self.compression[0] * (latent_frames - 1)

    def latent_frames(self, frames: int) -> "int | None":
        """Latent frames of `frames` pixel frames, or None when no whole number of latent frames makes them."""
        k, rest = divmod(frames - 1, self.compression[0])
        return k + 1 if frames >= 1 and not rest else None

    @torch.no_grad()
    def encode(self, video: torch.Tensor, chunk_frames: int) -> torch.Tensor:
        """video uint8 [F, H, W, 3] -> tokens [t, h, w] of its latent frames. As Cosmos's pipeline does, the clip is
        padded to the model's `chunk_frames` with its last frame and encoded whole; its first t latent frames are
        kept (the tokenizer is causal: they see the given frames only)."""
        t = self.latent_frames(video.shape[0])
        pad = video[-1:].expand(chunk_frames - video.shape[0], -1, -1, -1)
        x = torch.cat([video, pad]).to(self.device).permute(3, 0, 1, 2)[None].float() / 127.5 - 1.0  # [1, 3, F, H, W]
        indices = self.encoder(x.to(self.dtype))[0]  # [1, T, h, w]
        return indices[0, :t].long()

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, t, h, w] -> uint8 frames [B, F, H, W, 3], cast as NVIDIA's code casts them (`cosmos_pixels`)."""
        tokens = torch.as_tensor(tokens, device=self.device).long()
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"video tokens must be in [0, {self.vocab_size}), got [{tokens.min()}, {tokens.max()}]")
        x = self.decoder(tokens)  # [B, 3, F, H, W] in [-1, 1], in the tokenizer's dtype
        return cosmos_pixels(x).permute(0, 2, 3, 4, 1).cpu()


def write_tokenizer_folder(source: "str | Path", out: "str | Path", compression=None,
                           vocab_size: int = 64000, dtype: str = "bfloat16") -> Path:
    """NVIDIA's tokenizer folder (encoder.jit, decoder.jit) -> a tokenizer folder of ours: the files and config.json.
    compression (frames, rows, cols): None reads it from the folder's name (Cosmos-1.0-Tokenizer-DV4x8x8: 4, 8, 8),
    else 8, 16, 16 (DV8x16x16, the Cosmos-1 AR models' tokenizer)."""
    source, out = Path(source), Path(out)
    if compression is None:
        named = re.search(r"DV(\d+)x(\d+)x(\d+)", source.resolve().name)
        compression = tuple(map(int, named.groups())) if named else (8, 16, 16)
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{source} has no {', '.join(missing)}: give NVIDIA's tokenizer folder "
                                "(Cosmos-1.0-Tokenizer-DV8x16x16)")
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, out / name)
    config = {"model_type": MODEL_TYPE, "encoder": FILES[0], "decoder": FILES[1], "compression": list(compression),
              "vocab_size": vocab_size, "dtype": dtype}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
