"""VideoPipeline on a Cosmos folder: given frames encoded and kept, Video2World's text features, Cosmos's sampling."""
import numpy as np
import pytest
import torch

from mmspec.pipelines import VideoPipeline
from mmspec.pipelines.cosmos import CosmosPipeline
from tiny import clip, tiny_cosmos_folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos")
    return {"base": tiny_cosmos_folder(root / "base"), "video2world": tiny_cosmos_folder(root / "v2w", True)}


def test_a_cosmos_folder_continues_the_given_frames_which_stay_bit_identical(folders):
    pipe = VideoPipeline.from_pretrained(folders["base"], allow_torchscript=True)
    assert isinstance(pipe, CosmosPipeline) and pipe.default_sampling == {"temperature": 1.0, "top_p": 0.8}
    video = clip(4)
    given = pipe.tokenizer.encode(video, 7).flatten()  # 2 latent frames of 2 x 2
    out = pipe(video=video, num_outputs=3, seed=1, window=16)
    assert out.tokens.shape == (3, 12) and (out.tokens[:, :8] == given).all()
    assert len(out.videos) == 3 and len(out.videos[0]) == 7 and out.videos[0][0].size == (16, 16)
    assert torch.equal(pipe.tokenizer.decode(out.tokens.view(3, 3, 2, 2))[0, 0],
                       torch.from_numpy(np.array(out.videos[0][0])))  # the frames: the tokens decoded
    ar = pipe(video=video, num_outputs=3, seed=1, method="ar")
    assert torch.equal(ar.tokens, out.tokens)  # exact, the default: AR's tokens
    assert ar.summary["nfe"] >= out.summary["nfe"]


def test_video2world_takes_text_features(folders, tmp_path):
    from safetensors.torch import save_file

    pipe = VideoPipeline.from_pretrained(folders["video2world"], allow_torchscript=True)
    features = torch.randn(5, 12)
    save_file({"context": features}, str(tmp_path / "prompt.safetensors"))
    by_file = pipe(str(tmp_path / "prompt.safetensors"), video=clip(1), seed=2, method="ar")
    by_tensor = pipe(features, video=clip(1), seed=2, method="coupled", window=8)
    assert by_file.tokens.shape == (1, 12) and (by_file.tokens[:, :4] == by_tensor.tokens[:, :4]).all()
    assert pipe(features, seed=2).tokens.shape == (1, 12)  # from <bov>, no frame given
    with pytest.raises(ValueError, match="needs prompt="):
        pipe(video=clip(1))


@pytest.mark.parametrize("frames, size", [(5, 16), (4, 24), (7, 16)])
def test_a_video_the_tokenizer_cannot_take_is_refused_saying_what_it_takes(folders, frames, size):
    pipe = VideoPipeline.from_pretrained(folders["base"], allow_torchscript=True)
    with pytest.raises(ValueError, match=f"video has {frames} frames of {size}x{size}; this model's tokenizer takes "
                                         "1 or 4 RGB frames of 16x16"):
        pipe(video=clip(frames, size=size))


def test_a_base_model_needs_a_video_and_no_prompt(folders):
    pipe = VideoPipeline.from_pretrained(folders["base"], allow_torchscript=True)
    with pytest.raises(ValueError, match="continues a video: pass video="):
        pipe()
    with pytest.raises(ValueError, match="takes no prompt"):
        pipe(torch.randn(5, 12), video=clip(1))


def test_the_tokenizer_loads_only_when_torchscript_is_allowed(folders):
    with pytest.raises(ValueError, match="--allow-torchscript"):
        VideoPipeline.from_pretrained(folders["base"])


def test_video2world_takes_text_through_a_local_t5(folders, tmp_path):
    """Cosmos's way: padded to 512 tokens, the states past the prompt zero, all of them attended to."""
    import json
    import shutil

    from transformers import T5Config, T5EncoderModel

    from tiny import word_tokenizer

    folder = tmp_path / "v2w-t5"
    shutil.copytree(folders["video2world"], folder)
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=40, d_model=12, d_kv=4, d_ff=16, num_layers=1, num_heads=3)).eval()
    t5.save_pretrained(folder / "t5")
    word_tokenizer().save_pretrained(folder / "t5")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "text_encoder": "t5"}))
    pipe = VideoPipeline.from_pretrained(folder, allow_torchscript=True)
    ids = torch.zeros(1, 512, dtype=torch.long)
    ids[0, :2] = torch.tensor([4, 5])  # "w1 w2"
    mask = (ids > 0).long()
    with torch.no_grad():
        features = t5(input_ids=ids, attention_mask=mask).last_hidden_state * mask[..., None]
    by_text = pipe("w1 w2", video=clip(1), seed=4, method="ar")
    assert torch.equal(by_text.tokens, pipe(features, video=clip(1), seed=4, method="ar").tokens)
    with pytest.raises(ValueError, match="a text prompt needs a local T5 encoder"):
        VideoPipeline.from_pretrained(folders["video2world"], allow_torchscript=True)("w1 w2", video=clip(1))


def test_a_call_s_rows_are_checked_with_the_longest_video_it_may_be_given(folders, monkeypatch, capsys):
    from mmspec import memory
    from mmspec.api import row_need

    pipe = VideoPipeline.from_pretrained(folders["base"], allow_torchscript=True)
    frames = torch.full((1, pipe.layout.length), -1)
    frames[0, :8] = 0  # 2 of its 3 latent frames given: one window over them and the token after
    need = row_need(pipe.target, None, pipe.layout, window=4, sampling=pipe.default_sampling, given=frames)
    assert need > row_need(pipe.target, None, pipe.layout, window=4, sampling=pipe.default_sampling)
    free = int((memory.fixed_bytes() + 3 * need) / memory.SHARE) + 1  # (4 rows without the video's window)
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    pipe.check_rows(None, 3, window=4, video=clip(4))
    with pytest.raises(memory.DoesNotFit, match="^4 rows at a time need about"):
        pipe.check_rows(None, 4, window=4, video=clip(4))
    monkeypatch.setattr(pipe.target, "session", None)  # any work would fail
    with pytest.raises(memory.DoesNotFit, match="^4 rows at a time need about"):  # a call: before its progress bar
        pipe(video=clip(4), num_outputs=4, batch_size=4, window=4, progress_bar=True)
    assert capsys.readouterr().err == ""  # (tqdm writes on stderr)
