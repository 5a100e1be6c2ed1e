"""Cosmos's discrete video tokenizer: TorchScript files, loaded only when allowed."""
import numpy as np
import pytest
import torch

from mmspec.tokenizers.cosmos import DiscreteVideoTokenizer, write_tokenizer_folder
from tiny import clip, rounded, script_tokenizer


@pytest.fixture
def nvidia_folder(tmp_path):
    """A tokenizer folder as NVIDIA ships one: encoder.jit and decoder.jit (scripted from tiny modules)."""
    folder = tmp_path / "Cosmos-1.0-Tokenizer-DV3x8x8"
    folder.mkdir()
    script_tokenizer(folder)
    return folder


def test_a_torchscript_tokenizer_round_trips_through_the_loader(nvidia_folder, tmp_path):
    folder = write_tokenizer_folder(nvidia_folder, tmp_path / "tokenizer", compression=(3, 8, 8), vocab_size=8,
                                    dtype="float32")
    tok = DiscreteVideoTokenizer.from_pretrained(folder, allow_torchscript=True)
    video = clip(4)  # [4, 16, 16, 3]: frame 0, then one latent frame of 3
    tokens = tok.encode(video, chunk_frames=7)  # padded to 7 frames with the last, 2 latent frames kept
    assert tokens.shape == (2, 2, 2)
    frames = tok.decode(tokens[None])  # [1, 4, 16, 16, 3]
    assert frames.shape == (1, 4, 16, 16, 3) and frames.dtype == torch.uint8
    assert torch.equal(frames[0, 0] > 127, video[0] > 127)  # frame 0 alone makes latent frame 0
    assert torch.equal(tok.encode(frames[0], chunk_frames=7), tokens)  # its own output encodes to the same tokens
    assert [tok.frames(t) for t in (1, 2, 3)] == [1, 4, 7] and tok.latent_frames(5) is None


def test_torchscript_is_refused_without_the_flag(nvidia_folder, tmp_path):
    folder = write_tokenizer_folder(nvidia_folder, tmp_path / "tokenizer", compression=(3, 8, 8), vocab_size=8)
    with pytest.raises(ValueError, match="TorchScript, which is code.*--allow-torchscript"):
        DiscreteVideoTokenizer.from_pretrained(folder)


def test_a_missing_tokenizer_is_named(nvidia_folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="no Cosmos video tokenizer at"):
        DiscreteVideoTokenizer.from_pretrained(tmp_path / "nowhere", allow_torchscript=True)
    (nvidia_folder / "decoder.jit").unlink()
    with pytest.raises(FileNotFoundError, match="has no decoder.jit"):
        write_tokenizer_folder(nvidia_folder, tmp_path / "tokenizer")


def test_the_compression_comes_from_nvidias_folder_name(nvidia_folder, tmp_path):
    import json

    write_tokenizer_folder(nvidia_folder, tmp_path / "tokenizer", vocab_size=8)
    assert json.loads((tmp_path / "tokenizer" / "config.json").read_text())["compression"] == [3, 8, 8]


def test_frames_hold_the_bytes_nvidias_code_writes(nvidia_folder, tmp_path):
    """Same tokens -> cosmos-predict1's cast (restated): (video * 0.5 + 0.5).clamp_(0, 1), then (video * 255) made
    uint8, in the decoder's own dtype -> the same frames."""
    folder = write_tokenizer_folder(nvidia_folder, tmp_path / "tokenizer", compression=(3, 8, 8), vocab_size=8)
    tok = DiscreteVideoTokenizer.from_pretrained(folder, allow_torchscript=True)
    tokens = torch.randint(8, (2, 2, 2, 2), generator=torch.Generator().manual_seed(0))  # [B, t, h, w]
    video = torch.jit.load(str(nvidia_folder / "decoder.jit"))(tokens)  # [B, 3, F, H, W]
    theirs = ((video * 0.5 + 0.5).clamp_(0, 1) * 255).to(torch.uint8).permute(0, 2, 3, 4, 1)
    assert torch.equal(tok.decode(tokens), theirs)
    assert not np.array_equal(theirs.numpy(), rounded(video.permute(0, 2, 3, 4, 1)))
