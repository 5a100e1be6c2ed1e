"""LlamaGen VQ weights, written with LlamaGen's key layout, decode to LlamaGen's pixels through diffusers."""
import argparse

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from mmspec.tokenizers.llamagen import load_llamagen_vq
from tiny import llamagen_vq_state_dict, png, rounded, taming_ops

CH, MULT, Z, EMB, CODES = 32, (1, 2), 32, 4, 10


def llamagen_decode(sd, codes):
    """LlamaGen's decode_code, restated: normalised codebook -> post_quant_conv -> taming decoder."""
    gn, conv, res, attn = taming_ops(sd)

    emb = F.normalize(sd["quantize.embedding.weight"], dim=-1)[codes].permute(0, 3, 1, 2)
    h = conv(conv(emb, "post_quant_conv.", 0), "decoder.conv_in.")
    h = res(attn(res(h, "decoder.mid.0."), "decoder.mid.1."), "decoder.mid.2.")
    for i in range(len(MULT)):
        for j in range(3):
            h = res(h, f"decoder.conv_blocks.{i}.res.{j}.")
            if i == 0:
                h = attn(h, f"decoder.conv_blocks.{i}.attn.{j}.")
        if i != len(MULT) - 1:
            h = conv(F.interpolate(h, scale_factor=2.0, mode="nearest"), f"decoder.conv_blocks.{i}.upsample.conv.")
    return conv(F.silu(gn(h, "decoder.norm_out.")), "decoder.conv_out.")


def test_llamagen_vq_decodes_like_llamagen(tmp_path):
    sd = llamagen_vq_state_dict()
    save_file(sd, str(tmp_path / "vq.safetensors"))
    kw = dict(codebook_size=CODES, embed_dim=EMB, z_channels=Z, ch=CH)
    with pytest.raises(ValueError, match="unknown LlamaGen VQ"):
        load_llamagen_vq(tmp_path / "vq.safetensors", model="VQ-32", **kw)
    tok = load_llamagen_vq(tmp_path / "vq.safetensors", model=MULT, **kw)
    with pytest.raises(ValueError, match="do not match"):
        load_llamagen_vq(tmp_path / "vq.safetensors", model=MULT, **{**kw, "codebook_size": CODES + 1})
    codes = torch.randint(CODES, (2, 3, 3), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(tok.decode(codes), llamagen_decode(sd, codes).clamp(-1, 1), atol=1e-4, rtol=1e-4)


def test_vq_training_checkpoint_with_args_loads(tmp_path):
    """LlamaGen's VQ training checkpoints hold `args` (an argparse.Namespace) beside model, optimizer and discriminator."""
    sd = llamagen_vq_state_dict()
    torch.save({"model": sd, "optimizer": {}, "discriminator": {}, "steps": 3,
                "args": argparse.Namespace(vq_model="VQ-16", codebook_size=CODES)}, tmp_path / "vq.pt")
    kw = dict(model=MULT, codebook_size=CODES, embed_dim=EMB, z_channels=Z, ch=CH)
    with pytest.raises(ValueError, match="allow-pickle"):
        load_llamagen_vq(tmp_path / "vq.pt", **kw)
    codes = torch.randint(CODES, (1, 3, 3), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(load_llamagen_vq(tmp_path / "vq.pt", allow_pickle=True, **kw).decode(codes),
                               llamagen_decode(sd, codes).clamp(-1, 1), atol=1e-4, rtol=1e-4)


def test_pictures_hold_the_bytes_llamagens_sampling_writes(tmp_path):
    """Same tokens -> LlamaGen's cast of a sample (sample_c2i_ddp.py, restated): clamp(127.5 x + 128, 0, 255) made
    uint8 on the VQ's pixels -> the same PNG bytes."""
    save_file(llamagen_vq_state_dict(), str(tmp_path / "vq.safetensors"))
    tok = load_llamagen_vq(tmp_path / "vq.safetensors", model=MULT, codebook_size=CODES, embed_dim=EMB, z_channels=Z,
                           ch=CH)
    codes = torch.randint(CODES, (2, 3, 3), generator=torch.Generator().manual_seed(3))
    samples = tok.decode(codes)  # [B, 3, H, W] in [-1, 1]
    theirs = torch.clamp(127.5 * samples + 128.0, 0, 255).permute(0, 2, 3, 1).to("cpu", dtype=torch.uint8).numpy()
    assert [png(im) for im in tok.decode_pil(codes)] == [png(a) for a in theirs]
    # it differs from rounding (x + 1) * 127.5 only near halves: there, the cast is LlamaGen's
    halves = torch.arange(1, 510, 2) / 255 - 1  # [255] (x + 1) * 127.5 = 0.5, 1.5, ... in exact arithmetic
    theirs = torch.clamp(127.5 * halves + 128.0, 0, 255).to(torch.uint8)
    assert torch.equal(tok.pixels(halves), theirs) and not np.array_equal(theirs.numpy(), rounded(halves))
