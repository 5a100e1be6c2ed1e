"""Method eagle in the pipelines: a model folder's head/ is loaded the first time an eagle spec needs it, for the
pipeline's target (its depth, device and dtype); a spec may name a head folder instead."""
import json

import pytest
import torch

from mmspec.methods import check_method
from mmspec.pipelines import ImagePipeline, TextPipeline, VideoPipeline
from mmspec.reference.eagle import save_head
from tiny import tiny_head, tiny_llama, word_tokenizer

EXACT = {"name": "eagle", "exact": True}


def test_image_head_loads_once_when_needed_and_exact_gives_ars_tokens(tiny_heads):
    pipe = ImagePipeline.from_pretrained(tiny_heads / "image")
    ar = pipe(["red heart", "apple"], num_outputs=2, seed=3, method="ar")
    assert pipe.has_head and pipe.heads == {}  # nothing loaded until a spec needs the head
    exact = pipe(["red heart", "apple"], num_outputs=2, seed=3, method=EXACT, window=5)
    assert torch.equal(exact.tokens, ar.tokens) and exact.stats.drafted.sum() > 0
    (head,) = pipe.heads.values()
    assert head.lm_head.weight.dtype == torch.float32  # the target's dtype, not the file's bf16
    sampled = pipe("red heart", seed=0, method="eagle", window=5)
    assert list(pipe.heads.values()) == [head] and sampled.stats.drafted.sum() > 0


def test_video_head_spliced_with_a_jacobi_window_gives_ars_tokens(tiny_heads):
    pipe = VideoPipeline.from_pretrained(tiny_heads / "video")
    ar = pipe("bounce apple", num_outputs=2, seed=1, method="ar")
    spliced = pipe("bounce apple", num_outputs=2, seed=1, method={**EXACT, "jacobi": 2}, window=6)
    assert torch.equal(spliced.tokens, ar.tokens)


def test_text_head_gives_ars_text(tiny_heads):
    pipe = TextPipeline.from_pretrained(tiny_heads / "text")
    call = dict(prompt=["<s> w3 w4", "<s> w9"], seed=2, max_new_tokens=10)
    ar = pipe(method="ar", **call)
    assert pipe(method=EXACT, window=4, **call).texts == ar.texts
    greedy = {"sampling": {"temperature": 0}, **call}
    assert pipe(method="eagle", window=4, **greedy).texts == pipe(method="ar", **greedy).texts


def test_a_spec_may_name_its_head_folder(tiny_models, tiny_heads):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image", dtype=torch.float64)
    assert not pipe.has_head
    folder = tiny_heads / "image" / "head"
    ar = pipe("apple", num_outputs=2, seed=5, method="ar")
    for named in (str(folder), folder):
        assert torch.equal(pipe("apple", num_outputs=2, seed=5, method={**EXACT, "head": named}, window=4).tokens,
                           ar.tokens)
    (head,) = pipe.heads.values()  # one folder, loaded once, in the target's dtype
    assert head.lm_head.weight.dtype == torch.float64


def test_a_head_config_without_layers_reads_the_default_layers_of_the_targets_depth(tmp_path):
    """vLLM's default for a published config that names none: layers 2, depth // 2 and depth - 3."""
    tiny_llama(layers=7, hidden=32, dtype=torch.float32).save_pretrained(tmp_path)
    word_tokenizer().save_pretrained(tmp_path)
    save_head(tiny_head(40, 32, layers=(2, 3, 4)), tmp_path / "head")
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    del config["target_layers"], config["eagle_config"]
    (tmp_path / "head" / "config.json").write_text(json.dumps(config))
    # checking a spec that names the folder loads nothing (without the depth, loading it would fail)
    assert check_method({"name": "eagle", "head": str(tmp_path / "head")}).name == "eagle"
    pipe = TextPipeline.from_pretrained(tmp_path)
    call = dict(prompt="<s> w3", seed=0, max_new_tokens=8)
    assert pipe(method=EXACT, window=3, **call).texts == pipe(method="ar", **call).texts
    (head,) = pipe.heads.values()
    assert head.config.target_layers == (2, 3, 4)


@pytest.mark.parametrize("kind", ["image", "text"])
def test_eagle_without_a_head_is_a_one_line_error_naming_the_folder_and_how_to_train_one(kind, tiny_models, tiny_text):
    folder = tiny_models / "image" if kind == "image" else tiny_text / "target"
    pipe = ImagePipeline.from_pretrained(folder) if kind == "image" else TextPipeline.from_pretrained(folder)
    assert not pipe.has_head
    with pytest.raises(FileNotFoundError) as err:
        pipe("red heart" if kind == "image" else "<s> w1", method="eagle")
    assert f"{folder} has no head/" in str(err.value) and "\n" not in str(err.value)
    assert f"mmspec train-head {folder} --out {folder / 'head'}" in str(err.value)


def test_eagle_without_a_head_fails_before_a_first_frame_is_drawn(tiny_heads):
    pipe = VideoPipeline.from_pretrained(tiny_heads / "video-from-text")  # its first-frame model has a head, it not
    pipe._render_first_frames = lambda *a, **kw: pytest.fail("a first frame was drawn before the method was checked")
    with pytest.raises(FileNotFoundError, match="has no head/"):
        pipe("bounce apple", method={"name": "eagle", "jacobi": 2})


def test_a_named_head_folder_that_is_not_there_is_a_clear_error(tiny_models, tmp_path):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    with pytest.raises(FileNotFoundError, match="EAGLE-3 head: no folder at"):
        pipe("red heart", method={"name": "eagle", "head": tmp_path / "x"})
