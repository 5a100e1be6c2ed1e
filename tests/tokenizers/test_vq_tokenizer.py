"""VQTokenizer over a small random diffusers VQModel: ids round trip and decoding through the codebook."""
import numpy as np
import pytest
import torch

diffusers = pytest.importorskip("diffusers")

from mmspec.tokenizers import VQTokenizer  # noqa: E402
from tiny import png, rounded  # noqa: E402


@pytest.fixture(scope="module")
def vq():
    torch.manual_seed(0)
    model = diffusers.VQModel(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                              up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, vq_embed_dim=4,
                              num_vq_embeddings=64, norm_num_groups=8, sample_size=16)
    return VQTokenizer(model)


def test_encode_shapes_and_range(vq):
    imgs = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    ids = vq.encode(imgs)
    assert ids.shape == (3, 8, 8) and ids.dtype == torch.long
    assert 0 <= ids.min() and ids.max() < vq.codebook_size
    assert vq.encode(imgs[:1]).equal(ids[:1])  # a batch row equals the single image


def test_decode_matches_quantized_forward(vq):
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    ids = vq.encode(x)
    with torch.no_grad():
        expected = vq.vq(x).sample.clamp(-1, 1)  # encode -> quantize -> decode inside diffusers
    assert torch.allclose(vq.decode(ids), expected, atol=1e-4)
    assert torch.allclose(vq.decode(ids.flatten(1)), expected, atol=1e-4)  # [B, h*w] for square grids
    ims = vq.decode_pil(ids)
    assert len(ims) == 2 and ims[0].size == (16, 16)


def test_decode_rejects_bad_ids(vq):
    with pytest.raises(ValueError, match="codebook ids"):
        vq.decode(torch.full((1, 2, 2), 64))
    with pytest.raises(ValueError, match="square grid"):
        vq.decode(torch.zeros(1, 6, dtype=torch.long))


def test_a_batch_row_decodes_to_the_pixels_of_the_image_alone(vq):
    """Batched convolutions round with the batch size and thread count; decoding must not (render jobs)."""
    ids = torch.randint(0, 64, (6, 8, 8), generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    try:
        batch = vq.decode(ids)
        torch.set_num_threads(1)
        alone = torch.cat([vq.decode(ids[i:i + 1]) for i in range(6)])
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(batch, alone)


def test_pictures_of_the_bundled_models_are_rounded(vq):
    """mmspec's own models (no family rule): round((x + 1) * 127.5) -> the PNG bytes."""
    ids = torch.randint(vq.codebook_size, (2, 8, 8), generator=torch.Generator().manual_seed(0))
    ours = rounded(vq.decode(ids).permute(0, 2, 3, 1))
    assert [png(im) for im in vq.decode_pil(ids)] == [png(a) for a in ours]
