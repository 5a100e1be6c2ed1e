"""Decoder pixels in [-1, 1] -> uint8, each family as its own code casts them.

The families differ in the last bit: mmspec's bundled models round, LlamaGen rounds half up from 127.5 x + 128,
Lumina-mGPT and deepseek truncate (x + 1) / 2 * 255 (for the same tokens about half the values of a picture differ by
one from rounding), Emu3 truncates after a float64 product, Cosmos truncates in the decoder's own dtype. Each rule
below restates its family's arithmetic, op for op in the same dtype, so a PNG holds the bytes the family's code
writes. Every rule is elementwise: any shape in, uint8 of the same shape out.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch


def bundled_pixels(x: torch.Tensor) -> torch.Tensor:
    """mmspec's own models (the bundled emoji ones): the nearest of 0..255 to (x + 1) * 127.5, in fp32."""
    return ((x.float() + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)


def llamagen_pixels(x: torch.Tensor) -> torch.Tensor:
    """LlamaGen's PNG per sample (autoregressive/sample/sample_c2i_ddp.py, sample_t2i_ddp.py, app.py):
    `torch.clamp(127.5 * samples + 128.0, 0, 255).to(torch.uint8)` on the VQ's fp32 output: 127.5 x + 128 truncated,
    half up from 127.5 x + 127.5. (Its single-grid scripts write torchvision's `save_image` grid instead.)"""
    return torch.clamp(127.5 * x.float() + 128.0, 0, 255).to(torch.uint8)


def chameleon_pixels(x: torch.Tensor) -> torch.Tensor:
    """Lumina-mGPT (Chameleon's VQGAN; model/chameleon_vae_ori/image_tokenizer.py, `_pil_from_chw_tensor`):
    `(clamp(x, -1, 1) + 1) / 2` in torch fp32, then `(hwc * 255).astype(np.uint8)` in numpy fp32: truncated."""
    return ((torch.clamp(x.float(), -1.0, 1.0) + 1.0) / 2.0 * 255).to(torch.uint8)


# deepseek's Janus and Janus-Pro (generation_inference.py, demo/app_januspro.py): the decoder's output made fp32,
# `np.clip((dec + 1) / 2 * 255, 0, 255)` assigned into a uint8 array (truncated): Lumina-mGPT's arithmetic, clipped
# after instead of clamped before, which gives the same bytes
janus_pixels = chameleon_pixels


# Emu3's image processor (its image_processing_emu3visionvq.py's defaults, IMAGENET_STANDARD mean and std):
# image_mean = image_std = 0.5 a channel, rescale_factor 1 / 255
EMU3_PROCESSOR = {"image_mean": (0.5, 0.5, 0.5), "image_std": (0.5, 0.5, 0.5), "rescale_factor": 1 / 255}


def emu3_pixels(x: torch.Tensor, image_mean=EMU3_PROCESSOR["image_mean"], image_std=EMU3_PROCESSOR["image_std"],
                rescale_factor: float = EMU3_PROCESSOR["rescale_factor"]) -> torch.Tensor:
    """Emu3 (`postprocess` of its image processor, Emu3's own and transformers' `Emu3ImageProcessor` alike, as the
    Emu3 docs call it), x [..., 3] channels last: unnormalise in fp32, (x - (-mean / std)) / (1 / std) a channel,
    then `rescale` by 1 / rescale_factor in float64 and back to fp32, then `.clip(0, 255).astype(np.uint8)`:
    truncated. The settings are the folder's processor's (`emu3_processor`)."""
    shift = torch.tensor([-m / s for m, s in zip(image_mean, image_std)], dtype=torch.float32)  # [3]
    scale = torch.tensor([1 / s for s in image_std], dtype=torch.float32)  # [3]
    y = (x.float() - shift) / scale
    return (y.double() * (1.0 / rescale_factor)).float().clip(0, 255).to(torch.uint8)


def emu3_processor(folder: "str | Path") -> dict:
    """An Emu3 folder's postprocessing settings (its preprocessor_config.json; Emu3's defaults where it has none),
    as emu3_pixels' keywords."""
    file = Path(folder) / "preprocessor_config.json"
    saved = json.loads(file.read_text()) if file.is_file() else {}
    settings = {k: saved.get(k, v) for k, v in EMU3_PROCESSOR.items()}
    for k in ("image_mean", "image_std"):  # (a processor may give one value for the three channels)
        settings[k] = tuple(settings[k]) if isinstance(settings[k], (list, tuple)) else (settings[k],) * 3
    return settings


def cosmos_pixels(x: torch.Tensor) -> torch.Tensor:
    """Cosmos-1 AR (cosmos-predict1: `(video * 0.5 + 0.5).clamp_(0, 1)` after the tokenizer's decode, then
    `prepare_video_batch_for_saving`'s `(video * 255).to(torch.uint8)`), in the decoder's own dtype (bf16 for
    NVIDIA's tokenizer): truncated."""
    return ((x * 0.5 + 0.5).clamp(0, 1) * 255).to(torch.uint8)


def to_pil(pixels: torch.Tensor) -> list:
    """uint8 pictures [B, H, W, 3] -> PIL RGB images."""
    from PIL import Image

    return [Image.fromarray(a) for a in pixels.cpu().numpy()]
