"""VQ image tokenizer over a diffusers `VQModel` folder or a patch VQ folder (mmspec.reference.patch_vq), each
config.json + safetensors.

`encode` maps images to codebook ids on the latent grid (64x64 -> 16x16 for the bundled emoji VQ,
32x32 -> 8x8); `decode` maps ids back to pixels through the codebook, bypassing re-quantisation.
Weights may be stored in bf16; they are run in `dtype` (fp32 by default). `decode_pil` casts pixels to uint8 with
the family's own rule (mmspec.tokenizers.pixels; the bundled models' by default).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mmspec.reference.patch_vq import PatchVQ, is_patch_folder, nearest_codes
from mmspec.tokenizers.pixels import bundled_pixels, to_pil


class _DiffusersVQ:
    """A diffusers VQModel behind PatchVQ's surface: latents, ids, embed, pixels."""

    def __init__(self, vq):
        self.vq = vq

    def latents(self, x):  # [B, 3, H, W] -> [B, D, h, w]
        return self.vq.encode(x).latents

    def ids(self, z):  # [B, D, h, w] -> [B, h, w]
        return nearest_codes(z, self.vq.quantize.embedding.weight)

    def embed(self, ids):  # [B, h, w] -> [B, D, h, w]
        B, h, w = ids.shape
        return self.vq.quantize.get_codebook_entry(ids.flatten(), shape=(B, h, w, self.vq.config.vq_embed_dim
                                                                           or self.vq.config.latent_channels))

    def pixels(self, q):  # [B, D, h, w] -> [B, 3, H, W]
        return self.vq.decode(q, force_not_quantize=True).sample


class VQTokenizer:
    def __init__(self, vq, device: "str | torch.device" = "cpu", dtype: torch.dtype = torch.float32,
                 pixels=bundled_pixels):
        """pixels: the family's cast of decoded pixels in [-1, 1] to uint8 (mmspec.tokenizers.pixels)."""
        self.pixels = pixels
        vq = vq.to(device=device)
        self.vq = (vq if next(vq.parameters()).dtype == dtype else vq.to(dtype=dtype)).eval()  # diffusers warns on
        self.device, self.dtype = torch.device(device), dtype                                # any dtype cast
        cfg = vq.config
        if isinstance(vq, PatchVQ):
            self._model = vq
            self.codebook_size, self.downsample = cfg.codebook_size, cfg.patch
        else:
            self._model = _DiffusersVQ(self.vq)
            self.codebook_size, self.downsample = cfg.num_vq_embeddings, 2 ** (len(cfg.block_out_channels) - 1)

    @classmethod
    def from_pretrained(cls, path: "str | Path", device: "str | torch.device" = "cpu",
                        dtype: torch.dtype = torch.float32, pixels=bundled_pixels) -> "VQTokenizer":
        from diffusers import VQModel

        from mmspec.loading import check_folder

        path = check_folder(path, "VQ tokenizer")
        if is_patch_folder(path):
            return cls(PatchVQ.from_pretrained(path, dtype=dtype), device=device, dtype=dtype, pixels=pixels)
        # torch_dtype at load (not a later .to) and no accelerate-only low-memory path: loads quietly
        vq = VQModel.from_pretrained(str(path), torch_dtype=dtype, low_cpu_mem_usage=False, use_safetensors=True)
        return cls(vq, device=device, dtype=dtype, pixels=pixels)

    def _to_tensor(self, images) -> torch.Tensor:
        """PIL image(s), uint8 arrays [..., H, W, 3] or float tensors [B, 3, H, W] in [-1, 1] -> [B, 3, H, W]."""
        if isinstance(images, torch.Tensor) and images.is_floating_point():
            x = images if images.dim() == 4 else images[None]
        else:
            if isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4:
                arr = np.asarray(images)
            else:
                if not isinstance(images, (list, tuple)):
                    images = [images]
                arr = np.stack([np.asarray(im.convert("RGB") if hasattr(im, "convert") else im) for im in images])
            x = torch.from_numpy(arr).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        return x.to(self.device, self.dtype)

    @torch.no_grad()
    def encode(self, images) -> torch.Tensor:
        """images -> codebook ids [B, h, w] (long)."""
        return self._model.ids(self._model.latents(self._to_tensor(images)))

    @torch.no_grad()
    def decode(self, ids: torch.Tensor) -> torch.Tensor:
        """codebook ids [B, h, w] (or [B, h*w] for a square grid) -> images [B, 3, H, W] in [-1, 1]."""
        ids = torch.as_tensor(ids, device=self.device).long()
        if ids.dim() == 2:
            side = int(round(ids.shape[1] ** 0.5))
            if side * side != ids.shape[1]:
                raise ValueError(f"cannot infer a square grid from {ids.shape[1]} ids; pass [B, h, w]")
            ids = ids.view(ids.shape[0], side, side)
        if ids.min() < 0 or ids.max() >= self.codebook_size:
            raise ValueError(f"codebook ids must be in [0, {self.codebook_size}), got [{ids.min()}, {ids.max()}]")
        emb = self._model.embed(ids).to(self.dtype)  # [B, D, h, w]
        # one image per decoder call: batched convolutions round differently with the batch size and
        # the thread count, and an image's pixels must depend on its tokens only (render jobs rely on it)
        return torch.cat([self._model.pixels(e[None]) for e in emb]).clamp(-1, 1)

    def decode_pil(self, ids: torch.Tensor, chunk: int = 256) -> list:
        """codebook ids -> list of PIL RGB images, cast by the family's rule (`pixels`), decoded `chunk` at a time
        (the float pictures of a large request would hold 48 KiB each at 64 x 64)."""
        images = []
        for part in torch.as_tensor(ids).split(chunk):
            images += to_pil(self.pixels(self.decode(part).permute(0, 2, 3, 1)))
        return images
