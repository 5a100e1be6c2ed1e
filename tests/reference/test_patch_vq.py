"""PatchVQ: a picture moved by whole tokens gives the same codes moved (what the bundled image model relies on to learn
a subject once), a folder round trip through VQTokenizer, and refusals of folders that are not its own."""
import json

import numpy as np
import pytest
import torch
from torch import nn

from mmspec.reference.patch_vq import PatchConfig, PatchVQ, is_patch_folder
from mmspec.tokenizers import VQTokenizer

CONFIG = PatchConfig(hidden=32, embed_dim=4, codebook_size=64, dec_channels=16, dec_blocks=1, pix_channels=8,
                     sample_size=32)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = PatchVQ(CONFIG).eval()
    with torch.no_grad():  # codes spread over the encoder's outputs, so that moves would change ids if they could
        z = m.latents(torch.rand(8, 3, 32, 32) * 2 - 1).permute(0, 2, 3, 1).reshape(-1, CONFIG.embed_dim)
        m.codebook.copy_(z[torch.randperm(len(z))[:CONFIG.codebook_size]])
    return m


def sprite_on_white(x: int, y: int, size: int = 32) -> torch.Tensor:
    """[1, 3, size, size] in [-1, 1]: a fixed random 12x12 sprite with its corner at (x, y) on white."""
    g = torch.Generator().manual_seed(3)
    pic = torch.ones(1, 3, size, size)
    pic[..., y:y + 12, x:x + 12] = torch.rand(1, 3, 12, 12, generator=g) * 2 - 1
    return pic


def test_codes_move_with_the_picture(model):
    tok = VQTokenizer(model)
    a, b = tok.encode(sprite_on_white(4, 4)), tok.encode(sprite_on_white(12, 12))  # moved by (2, 2) tokens
    assert a.unique().numel() > 5  # the sprite's 9 tokens take several codes
    assert torch.equal(a[:, 0:5, 0:5], b[:, 2:7, 2:7])  # the sprite's tokens and their surroundings, moved


def test_white_takes_one_code_wherever_it_is(model):
    tok = VQTokenizer(model)
    ids = tok.encode(sprite_on_white(4, 4))
    white = torch.ones(8, 8, dtype=torch.bool)
    white[1:4, 1:4] = False  # the 12-pixel sprite at (4, 4) covers tokens 1..3 on each axis
    assert ids[0][white].unique().numel() == 1


def test_a_3x3_encoder_is_caught():
    """The wrong variant: a first convolution that sees neighbouring pixels (as a VQGAN's does) moves codes."""
    torch.manual_seed(0)
    m = PatchVQ(CONFIG).eval()
    m.encoder[0] = nn.Conv2d(3, CONFIG.hidden, 7, stride=CONFIG.patch, padding=3)
    with torch.no_grad():
        z = m.latents(torch.rand(8, 3, 32, 32) * 2 - 1).permute(0, 2, 3, 1).reshape(-1, CONFIG.embed_dim)
        m.codebook.copy_(z[torch.randperm(len(z))[:CONFIG.codebook_size]])
    tok = VQTokenizer(m)
    a, b = tok.encode(sprite_on_white(4, 4)), tok.encode(sprite_on_white(12, 12))
    white = torch.ones(8, 8, dtype=torch.bool)
    white[1:4, 1:4] = False
    assert not torch.equal(a[:, 0:5, 0:5], b[:, 2:7, 2:7])  # the border's zero padding reaches the moved codes
    assert a[0][white].unique().numel() > 1  # white beside the sprite differs from white far from it


def test_folder_round_trip(model, tmp_path):
    model.save_pretrained(tmp_path / "vq", dtype=torch.bfloat16)
    assert is_patch_folder(tmp_path / "vq")
    tok = VQTokenizer.from_pretrained(tmp_path / "vq")
    assert tok.codebook_size == 64 and tok.downsample == 4
    pics = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    ids = tok.encode(pics)
    assert ids.shape == (2, 8, 8)
    ref = PatchVQ(CONFIG)
    ref.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
    with torch.no_grad():
        expected = ref.pixels(ref.embed(ids)).clamp(-1, 1)
    assert torch.allclose(tok.decode(ids), expected, atol=1e-5)
    assert tok.decode_pil(ids)[0].size == (32, 32)


def test_training_pass_reaches_the_encoder(model):
    m = PatchVQ(CONFIG)
    rec, vq_loss, ids, z = m(torch.rand(2, 3, 16, 16) * 2 - 1)
    assert rec.shape == (2, 3, 16, 16) and ids.shape == (2, 4, 4) and z.shape == (2, 4, 4, 4)
    (rec.pow(2).mean() + vq_loss).backward()
    assert m.encoder[0].weight.grad.abs().sum() > 0 and m.codebook.grad.abs().sum() > 0


def test_bad_folders_and_pictures_are_refused(model, tmp_path):
    model.save_pretrained(tmp_path / "vq")
    cfg = json.loads((tmp_path / "vq" / "config.json").read_text())
    (tmp_path / "vq" / "config.json").write_text(json.dumps(cfg | {"codebook_size": 128}))
    with pytest.raises(ValueError, match="do not match the config"):
        PatchVQ.from_pretrained(tmp_path / "vq")
    (tmp_path / "vq" / "config.json").write_text(json.dumps(cfg | {"stride": 2}))
    with pytest.raises(ValueError, match="unknown fields"):
        PatchVQ.from_pretrained(tmp_path / "vq")
    with pytest.raises(ValueError, match="whole number"):
        model.latents(torch.zeros(1, 3, 30, 32))
