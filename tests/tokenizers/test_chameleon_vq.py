"""Chameleon's VQGAN (taming layout, vqgan.ckpt + vqgan.yaml) through diffusers' VQModel: decode gives the taming
decoder's pixels, encode gives transformers' ChameleonVQVAE's codes, the converted folder loads the same."""
import re

import pytest
import torch
import torch.nn.functional as F
import yaml
from transformers import ChameleonVQVAEConfig
from transformers.models.chameleon.modeling_chameleon import ChameleonVQVAE

from mmspec.cli import main
from mmspec.tokenizers.chameleon import load_chameleon_vq
from mmspec.tokenizers.vq import VQTokenizer
from tiny import TamingWeights, taming_ops

CH, MULT, BLOCKS, ATTN, RES, Z, EMB, CODES = 32, (1, 2), 1, (8,), 16, 8, 4, 10  # attention at the 8 x 8 level


def yaml_config() -> dict:
    dd = dict(double_z=False, z_channels=Z, resolution=RES, in_channels=3, out_ch=3, ch=CH, ch_mult=list(MULT),
              num_res_blocks=BLOCKS, attn_resolutions=list(ATTN), dropout=0.0)
    return {"model": {"target": "taming.models.vqgan.VQModel",
                      "params": {"embed_dim": EMB, "n_embed": CODES, "ddconfig": dd, "lossconfig": {"target": "x"}}}}


def hf_encoder() -> ChameleonVQVAE:
    return ChameleonVQVAE(ChameleonVQVAEConfig(embed_dim=EMB, num_embeddings=CODES, latent_channels=Z, resolution=RES,
                                               base_channels=CH, channel_multiplier=list(MULT), num_res_blocks=BLOCKS,
                                               attn_resolutions=list(ATTN))).eval()


def taming_state_dict(seed=0) -> dict:
    """A VQGAN checkpoint's weights under taming's names: the encoder's as transformers' ChameleonVQVAE names them
    (it keeps taming's), the decoder's written here, and a training loss's weights beside them."""
    sd = {}
    weights = TamingWeights(sd, seed)
    r, res, attn = weights.r, weights.res, weights.attn
    sd.update({k: 1 + r(*v.shape) if re.search(r"norm(1|2|_out)?\.weight$", k) else r(*v.shape)
               for k, v in hf_encoder().state_dict().items()})

    top = CH * MULT[-1]
    sd.update({"decoder.conv_in.weight": r(top, Z, 3, 3), "decoder.conv_in.bias": r(top),
               "post_quant_conv.weight": r(Z, EMB, 1, 1), "post_quant_conv.bias": r(Z)})
    res("decoder.mid.block_1.", top, top)
    attn("decoder.mid.attn_1.", top)
    res("decoder.mid.block_2.", top, top)
    cin, size = top, RES // 2 ** (len(MULT) - 1)
    for i in reversed(range(len(MULT))):
        for j in range(BLOCKS + 1):
            res(f"decoder.up.{i}.block.{j}.", cin, CH * MULT[i])
            cin = CH * MULT[i]
            if size in ATTN:
                attn(f"decoder.up.{i}.attn.{j}.", cin)
        if i != 0:
            sd.update({f"decoder.up.{i}.upsample.conv.weight": r(cin, cin, 3, 3),
                       f"decoder.up.{i}.upsample.conv.bias": r(cin)})
            size *= 2
    sd.update({"decoder.norm_out.weight": 1 + r(cin), "decoder.norm_out.bias": r(cin),
               "decoder.conv_out.weight": r(3, cin, 3, 3), "decoder.conv_out.bias": r(3),
               "loss.discriminator.main.0.weight": r(4, 3, 4, 4), "loss.logvar": torch.zeros(())})
    return sd


def taming_decode(sd, codes):
    """taming's VQModel.decode after get_codebook_entry, restated: codebook -> post_quant_conv -> decoder, whose
    levels run from up[n-1] (the lowest resolution) to up[0]."""
    gn, conv, res, attn = taming_ops(sd)

    h = conv(conv(sd["quantize.embedding.weight"][codes].permute(0, 3, 1, 2), "post_quant_conv.", 0), "decoder.conv_in.")
    h = res(attn(res(h, "decoder.mid.block_1."), "decoder.mid.attn_1."), "decoder.mid.block_2.")
    for i in reversed(range(len(MULT))):
        for j in range(BLOCKS + 1):
            h = res(h, f"decoder.up.{i}.block.{j}.")
            if f"decoder.up.{i}.attn.{j}.q.weight" in sd:
                h = attn(h, f"decoder.up.{i}.attn.{j}.")
        if i != 0:
            h = conv(F.interpolate(h, scale_factor=2.0, mode="nearest"), f"decoder.up.{i}.upsample.conv.")
    return conv(F.silu(gn(h, "decoder.norm_out.")), "decoder.conv_out.")


@pytest.fixture
def release(tmp_path):
    """vqgan.ckpt (a Lightning checkpoint) and vqgan.yaml, as Chameleon ships them."""
    sd = taming_state_dict()
    torch.save({"state_dict": sd, "epoch": 3, "global_step": 100}, tmp_path / "vqgan.ckpt")
    (tmp_path / "vqgan.yaml").write_text(yaml.safe_dump(yaml_config()))
    return sd, tmp_path / "vqgan.ckpt", tmp_path / "vqgan.yaml"


def test_decode_equals_the_taming_decoder_and_encode_transformers(release):
    sd, ckpt, config = release
    with pytest.raises(ValueError, match="allow-pickle"):
        load_chameleon_vq(ckpt, config)
    tok = load_chameleon_vq(ckpt, config, allow_pickle=True)
    codes = torch.randint(CODES, (2, 4, 6), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(tok.decode(codes), taming_decode(sd, codes).clamp(-1, 1), atol=1e-4, rtol=1e-4)
    encoder = hf_encoder()
    encoder.load_state_dict({k: sd[k] for k in encoder.state_dict()})
    images = torch.rand(2, 3, RES, RES, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        expected = encoder.encode(images).image_tokens.view(2, RES // 2, RES // 2)
    assert torch.equal(tok.encode(images), expected)
    # the same arithmetic: in float64 no rounding is left to hide a difference in
    double = VQTokenizer(load_chameleon_vq(ckpt, config, allow_pickle=True).vq, dtype=torch.float64)
    torch.testing.assert_close(double.decode(codes), taming_decode({k: v.double() for k, v in sd.items()}, codes)
                               .clamp(-1, 1), atol=1e-12, rtol=0)


def test_convert_writes_a_folder_that_decodes_the_same(release, tmp_path, capsys):
    sd, ckpt, config = release
    out = tmp_path / "model" / "vqgan"
    assert main(["convert", "chameleon-vq", str(ckpt), str(out), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--allow-pickle" in err and len(err.splitlines()) == 1
    assert main(["convert", "chameleon-vq", str(ckpt), str(out), "--config", str(config), "--allow-pickle"]) == 0
    codes = torch.randint(CODES, (1, 2, 2), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(VQTokenizer.from_pretrained(out).decode(codes),
                               load_chameleon_vq(ckpt, config, allow_pickle=True).decode(codes), atol=0, rtol=0)
    assert main(["convert", "chameleon-vq", str(ckpt), str(out)]) == 2
    assert "--config" in capsys.readouterr().err
