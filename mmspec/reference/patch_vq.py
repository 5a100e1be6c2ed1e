"""A patch VQ tokenizer: each token's code is computed from its own patch of pixels only, so a picture moved by whole
tokens gives the same codes, moved. The decoder looks at neighbouring codes, so edges between patches stay smooth.

Why: an AR model learns a subject once, not once for each place, only if the subject's tokens copy under a move. A
VQGAN encoder (3x3 convolutions, mid-block attention, GroupNorm over the picture) lets every code see far beyond its
patch: the diffusers VQModel bundled as emoji-vq before this one kept 83% of a sprite's codes after a 2-token move
(models/recipes/train_vq.py `moved_codes_kept`), and gave a plain white interior several different codes.

Folder: config.json {"_class_name": "PatchVQ", PatchConfig fields} + model.safetensors (loaded strictly).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

CLASS_NAME = "PatchVQ"
WEIGHTS = "model.safetensors"


@dataclass
class PatchConfig:
    patch: int = 4  # pixels per token side
    hidden: int = 256  # the hidden size of the encoder's per-patch MLP
    embed_dim: int = 8  # code vector size
    codebook_size: int = 1024
    dec_channels: int = 128  # the decoder's channels on the token grid
    dec_blocks: int = 2  # residual blocks on the token grid (each widens what a pixel sees by 2 tokens a side)
    pix_channels: int = 32  # the decoder's channels at full resolution
    sample_size: int = 64  # the picture edge it was trained on (a hint for pipelines, not a limit)


def nearest_codes(z: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """Code vectors z [B, D, h, w] -> the ids [B, h, w] of their nearest rows of codebook [K, D] (in fp32)."""
    B, D, h, w = z.shape
    flat = z.permute(0, 2, 3, 1).reshape(-1, D).float()
    return torch.cdist(flat, codebook.float()).argmin(1).view(B, h, w)


class ResBlock(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):  # [B, C, H, W]
        return x + self.conv2(F.silu(self.conv1(F.silu(x))))


class PatchVQ(nn.Module):
    def __init__(self, config: PatchConfig):
        super().__init__()
        self.config = c = config
        # kernel = stride = patch, then 1x1 convolutions: a code depends on its own patch's pixels and nothing else
        self.encoder = nn.Sequential(nn.Conv2d(3, c.hidden, c.patch, stride=c.patch), nn.SiLU(),
                                     nn.Conv2d(c.hidden, c.hidden, 1), nn.SiLU(), nn.Conv2d(c.hidden, c.embed_dim, 1))
        self.codebook = nn.Parameter(torch.randn(c.codebook_size, c.embed_dim))  # [K, D]
        self.decoder = nn.Sequential(
            nn.Conv2d(c.embed_dim, c.dec_channels, 3, padding=1), *[ResBlock(c.dec_channels) for _ in range(c.dec_blocks)],
            nn.SiLU(), nn.Conv2d(c.dec_channels, c.pix_channels * c.patch ** 2, 1), nn.PixelShuffle(c.patch),
            ResBlock(c.pix_channels), nn.SiLU(), nn.Conv2d(c.pix_channels, 3, 3, padding=1))

    def latents(self, x: torch.Tensor) -> torch.Tensor:
        """pixels [B, 3, H, W] in [-1, 1] -> code vectors before quantisation [B, D, H/p, W/p]."""
        p = self.config.patch
        if x.shape[-1] % p or x.shape[-2] % p:
            raise ValueError(f"a picture of {tuple(x.shape[-2:])} pixels is not a whole number of {p}-pixel patches")
        return self.encoder(x)

    def ids(self, z: torch.Tensor) -> torch.Tensor:
        """[B, D, h, w] -> nearest codebook ids [B, h, w]."""
        return nearest_codes(z, self.codebook)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, h, w] -> code vectors [B, D, h, w]."""
        return self.codebook[ids].permute(0, 3, 1, 2)

    def pixels(self, q: torch.Tensor) -> torch.Tensor:
        """code vectors [B, D, h, w] -> pixels [B, 3, h*p, w*p] (not clamped)."""
        return self.decoder(q)

    def forward(self, x: torch.Tensor, beta: float = 0.25):
        """Training pass: -> (reconstruction [B, 3, H, W], VQ loss (codebook + beta * commitment), ids [B, h, w],
        latents [B, D, h, w]); the decoder's gradient reaches the encoder straight through the quantiser."""
        z = self.latents(x)
        ids = self.ids(z)
        q = self.embed(ids)
        vq_loss = F.mse_loss(q, z.detach()) + beta * F.mse_loss(z, q.detach())
        return self.pixels(z + (q - z).detach()), vq_loss, ids, z

    def save_pretrained(self, path: "str | Path", dtype: torch.dtype | None = None) -> None:
        from safetensors.torch import save_file
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"_class_name": CLASS_NAME, **asdict(self.config)}, indent=2))
        save_file({k: (v.to(dtype) if dtype else v).contiguous() for k, v in self.state_dict().items()},
                  str(path / WEIGHTS))

    @classmethod
    def from_pretrained(cls, path: "str | Path", dtype: torch.dtype = torch.float32) -> "PatchVQ":
        from mmspec.loading import check_folder, check_header, load_strict, read_safetensors
        path = check_folder(path, "patch VQ tokenizer")
        raw = json.loads((path / "config.json").read_text())
        known = {f.name for f in fields(PatchConfig)}
        unknown = sorted(set(raw) - known - {"_class_name"})
        if raw.get("_class_name") != CLASS_NAME or unknown:
            raise ValueError(f"{path}/config.json is not a {CLASS_NAME} config (class {raw.get('_class_name')!r}, "
                             f"unknown fields {unknown})")
        with torch.device("meta"):
            skeleton = cls(PatchConfig(**{k: v for k, v in raw.items() if k in known}))
        check_header(skeleton, path / WEIGHTS, str(path))
        model = cls(skeleton.config)
        load_strict(model, read_safetensors(path / WEIGHTS), str(path))
        return model.to(dtype).eval()


def is_patch_folder(path: "str | Path") -> bool:
    """Does this tokenizer folder hold a PatchVQ (rather than a diffusers VQModel)?"""
    config = Path(path) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("_class_name") == CLASS_NAME
