"""VQ image tokenizer over a diffusers `VQModel` folder (config.json + safetensors).

`encode` maps images to codebook ids on the latent grid (64x64 -> 16x16 for the bundled emoji VQ,
32x32 -> 8x8); `decode` maps ids back to pixels through the codebook, bypassing re-quantisation.
Weights may be stored in bf16; they are run in `dtype` (fp32 by default).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


class VQTokenizer:
    def __init__(self, vq, device: "str | torch.device" = "cpu", dtype: torch.dtype = torch.float32):
        vq = vq.to(device=device)
        self.vq = (vq if vq.dtype == dtype else vq.to(dtype=dtype)).eval()  # diffusers warns on any dtype cast
        self.device, self.dtype = torch.device(device), dtype
        cfg = vq.config
        self.codebook_size = cfg.num_vq_embeddings
        self.embed_dim = cfg.vq_embed_dim or cfg.latent_channels
        self.downsample = 2 ** (len(cfg.block_out_channels) - 1)

    @classmethod
    def from_pretrained(cls, path: "str | Path", device: "str | torch.device" = "cpu",
                        dtype: torch.dtype = torch.float32) -> "VQTokenizer":
        from diffusers import VQModel

        from mmspec.loading import check_folder

        path = check_folder(path, "VQ tokenizer")
        # torch_dtype at load (not a later .to) and no accelerate-only low-memory path: loads quietly
        vq = VQModel.from_pretrained(str(path), torch_dtype=dtype, low_cpu_mem_usage=False, use_safetensors=True)
        return cls(vq, device=device, dtype=dtype)

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
        h = self.vq.encode(self._to_tensor(images)).latents
        B, C, H, W = h.shape
        z = h.permute(0, 2, 3, 1).reshape(-1, C)
        idx = torch.cdist(z.float(), self.vq.quantize.embedding.weight.float()).argmin(1)
        return idx.view(B, H, W)

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
        B, h, w = ids.shape
        emb = self.vq.quantize.get_codebook_entry(ids.flatten(), shape=(B, h, w, self.embed_dim)).to(self.dtype)
        # one image per decoder call: batched convolutions round differently with the batch size and
        # the thread count, and an image's pixels must depend on its tokens only (render jobs rely on it)
        return torch.cat([self.vq.decode(e[None], force_not_quantize=True).sample for e in emb]).clamp(-1, 1)

    def decode_pil(self, ids: torch.Tensor, chunk: int = 256) -> list:
        """codebook ids -> list of PIL RGB images, decoded `chunk` at a time (the float pictures of a large request
        would hold 48 KiB each at 64 x 64)."""
        from PIL import Image
        images = []
        for part in torch.as_tensor(ids).split(chunk):
            x = ((self.decode(part).float().permute(0, 2, 3, 1) + 1) * 127.5).round().clamp(0, 255).byte().cpu().numpy()
            images += [Image.fromarray(a) for a in x]
        return images
