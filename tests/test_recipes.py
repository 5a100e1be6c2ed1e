"""The pure parts of the bundled models' recipes (models/recipes): staging layout, variety count, classifier inputs.
Training and evaluation themselves need the npm art in .cache/ and are not run here."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "recipes"))
import classifier  # noqa: E402
import data  # noqa: E402
import eval_image  # noqa: E402
import eval_video  # noqa: E402


def test_placements_sit_on_the_token_grid_inside_the_canvas_and_some_are_held_out():
    for edge in data.STAGE_EDGES:
        spots = data.placements(edge)
        assert spots and all(x % data.STAGE_STEP == 0 and y % data.STAGE_STEP == 0 and
                             0 <= x <= data.STAGE_CANVAS - edge and 0 <= y <= data.STAGE_CANVAS - edge
                             for _, x, y in spots)
        assert any(not data.held_out_staging(*p) for p in spots)  # every edge is trained on
    assert not data.held_out_staging(data.STAGE_CANVAS, 0, 0)
    small = data.placements(32)
    assert 0.05 < np.mean([data.held_out_staging(*p) for p in small]) < 0.3


def _square(x: int, y: int) -> np.ndarray:
    im = np.full((64, 64, 3), 255, np.uint8)
    im[y:y + 24, x:x + 24] = (200, 30, 30)
    return im


def test_distinct_counts_visibly_different_pictures_only():
    rng = np.random.default_rng(0)
    same = np.stack([_square(8, 8)] * 4)
    noisy = np.clip(same.astype(int) + rng.integers(-6, 7, same.shape), 0, 255).astype(np.uint8)
    assert eval_image.distinct(same) == 1 and eval_image.distinct(noisy) == 1
    moved = np.stack([_square(0, 0), _square(36, 0), _square(0, 36), _square(1, 0)])
    assert eval_image.distinct(moved) == 3  # the last is the first moved by one pixel


def test_eval_prompts_name_forty_training_subjects():
    assert len(eval_image.EVAL_PROMPTS) == 40
    assert all(s in data.IMAGE_SUBJECTS and s in p for p, s in eval_image.EVAL_PROMPTS)


@pytest.mark.parametrize("size", [32, 64])
def test_the_classifier_takes_image_and_video_frames(size):
    net = classifier.SubjectNet(len(data.IMAGE_SUBJECTS))
    frames = np.zeros((3, size, size, 3), np.uint8)
    assert classifier.predict(net, frames).shape == (3,)


def test_the_classifiers_scene_frames_are_video_frames_of_the_scene():
    from PIL import Image

    from mmspec.pipelines.scene import BACKGROUNDS

    sprite = Image.new("RGBA", (64, 64), (10, 200, 10, 255))
    frames, subjects = classifier.scene_frames([(sprite, 3), (sprite, 5)], per_sprite=20, seed=0)
    assert frames.shape == (40, 32, 32, 3) and list(subjects) == [3] * 20 + [5] * 20
    backgrounds = {tuple(v) for v in BACKGROUNDS.values()}
    for f in frames:
        colours, counts = np.unique(f.reshape(-1, 3), axis=0, return_counts=True)
        green = np.abs(f.astype(int) - (10, 200, 10)).sum(-1) < 30
        assert 25 <= green.sum() <= 26 ** 2  # the sprite, from a zoom's smallest (6 px) to its largest (26 px)
        assert tuple(colours[counts.argmax()]) in backgrounds | {(10, 200, 10)}
    assert len({f.tobytes() for f in frames}) > 30  # motions, frames and places vary


def test_staging_weights_give_every_edge_the_same_share():
    meta = [{"edge": e} for e in data.STAGE_EDGES for _ in data.placements(e)]  # 81 stagings of 32, one of 64
    w = data.staging_weights(meta)
    edges = np.array([m["edge"] for m in meta])
    shares = [w[edges == e].sum() for e in data.STAGE_EDGES]
    assert np.isclose(w.sum(), 1) and np.allclose(shares, 1 / len(data.STAGE_EDGES))


def test_the_weights_exported_are_those_of_the_lowest_held_out_loss_even_after_a_resume(tmp_path):
    import torch
    import train_gpt

    model = torch.nn.Linear(2, 2)
    best = train_gpt.Best(tmp_path)
    for step, loss in ((200, 1.0), (400, 0.5), (600, 0.7)):
        with torch.no_grad():
            model.weight.fill_(step)
        best.see(model, loss, step)
    resumed = train_gpt.Best(tmp_path)  # a run interrupted and started again
    assert (resumed.step, resumed.loss) == (400, 0.5)
    resumed.restore(model)
    assert torch.all(model.weight == 400)
    assert train_gpt.Best(tmp_path, fresh=True).step == 0 and not (tmp_path / "best.safetensors").exists()


def test_gpt_and_decoder_sizes_replace_the_recipes_and_bad_ones_are_refused():
    import common
    import train_gpt
    import train_vq

    assert common.sizes(["dim=256", "n_layer=8"], train_gpt.GPT_SIZES, "--gpt") == {"dim": 256, "n_layer": 8}
    for bad in (["vocab_size=9"], ["dim=big"], ["dim"]):
        with pytest.raises(SystemExit, match="--gpt"):
            common.sizes(bad, train_gpt.GPT_SIZES, "--gpt")
    assert common.sizes(["dec_blocks=4"], train_vq.DECODER_SIZES, "--decoder") == {"dec_blocks": 4}
    with pytest.raises(SystemExit, match="--decoder"):  # the codes' sizes stay --init's
        common.sizes(["codebook_size=4096"], train_vq.DECODER_SIZES, "--decoder")
    assert common.sizes(["patch=2", "codebook_size=1024"], train_vq.CODE_SIZES, "--codes") == {
        "patch": 2, "codebook_size": 1024}


@pytest.mark.parametrize("patch, grid", [(4, 8), (2, 16)])
def test_the_video_models_token_grid_and_block_come_from_its_tokenizer(tmp_path, patch, grid):
    import train_gpt

    from mmspec.reference.patch_vq import PatchConfig, PatchVQ

    PatchVQ(PatchConfig(patch=patch, hidden=16, codebook_size=32, dec_channels=8, pix_channels=4,
                        sample_size=32)).save_pretrained(tmp_path)
    spec = train_gpt.on_tokenizer(train_gpt.MODELS["emoji-video"], tmp_path)
    assert spec["layout"] == ("Grid3D", [8, grid, grid]) and spec["gpt"]["block_size"] == 8 * grid * grid
    assert train_gpt.given_length(spec) == grid * grid  # frame 0
    assert train_gpt.MODELS["emoji-video"]["layout"][1] == [8, 8, 8]  # the recipe's own spec untouched


def test_fillers_wrap_the_subject_words_in_order_and_never_use_the_held_out_wordings():
    import train_gpt

    vocab = ["<pad>", "<unk>", "red", "heart", "heavy", "flag", "clock", "emoji", "symbol"]
    fillers = train_gpt.filler_words(vocab, [["red", "heart", "heavy"]])
    assert set(fillers) == {"<unk>", "flag", "clock"}  # no subject's word, no eval_image wording word
    assert {w for fmt in eval_image.WORDINGS for w in fmt.replace("{}", "").split()} - {"of"} <= \
        train_gpt.HELD_OUT_FILLERS  # ("of" is a stop word: prompts drop it)
    index = {w: i for i, w in enumerate(vocab)}
    rng = np.random.default_rng(0)
    rows = train_gpt.condition_batch([["red", "heart"]] * 400, index, rng, drop=0.0, fillers=fillers,
                                     filler_share=0.5).numpy()
    said = [[vocab[i] for i in row if i] for row in rows]
    wrapped = [ws for ws in said if set(ws) - {"red", "heart"}]
    assert 0.4 < len(wrapped) / len(said) < 0.6  # the share asked for, one or two fillers each
    assert all(set(ws) <= {"red", "heart", *fillers} and 1 <= len(set(ws) & set(fillers)) and len(ws) <= 4
               and [w for w in ws if w in ("red", "heart")] in (["red", "heart"], ["red"], ["heart"]) for ws in wrapped)
    assert {ws[0] for ws in wrapped} & set(fillers)  # fillers go before the subject too ("emoji of rocket")
    plain = train_gpt.condition_batch([["red", "heart"]] * 50, index, rng, drop=0.0).numpy()
    assert all(sum(i > 0 for i in row) <= 2 for row in plain)  # without fillers, nothing is added


class _Tokenizer:
    """A frame tokenizer stand-in: 4-pixel patches; `levels` grey levels per channel (256: lossless)."""
    downsample = 4

    def __init__(self, levels: int):
        self.step = 256 // levels

    def encode(self, images):
        return np.stack([np.asarray(im) // self.step for im in images])

    def decode_pil(self, codes):
        from PIL import Image
        return [Image.fromarray((c * self.step).astype(np.uint8)) for c in codes]


def _pipe(levels: int):
    from types import SimpleNamespace
    return SimpleNamespace(layout=SimpleNamespace(t=8, w=8), tokenizer=_Tokenizer(levels))


def test_the_ideal_clip_starts_where_the_pipeline_stages_frame_0_and_moves():
    from PIL import Image
    from mmspec.pipelines.scene import first_frame
    picture = Image.new("RGB", (64, 64), "white")
    picture.paste((200, 30, 30), (16, 16, 48, 48))
    clip = eval_video.ideal_clip(_pipe(256), "slide right red apple blue background", picture)
    assert len(clip) == 8 and clip[0].shape == (32, 32, 3)
    assert np.array_equal(clip[0], np.asarray(first_frame(picture, "slide right", "blue")))
    x = eval_video.track(np.stack(clip))[:, 0]
    assert x[-1] - x[0] > 3  # the sprite's centroid moves right


def test_the_tokenizer_ceiling_is_perfect_for_a_lossless_tokenizer_only():
    from PIL import Image
    from types import SimpleNamespace
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    pictures = SimpleNamespace(images=[picture, picture])
    rows = ["bounce red apple", "zoom in red apple"]
    lossless = eval_video.tokenizer_ceiling(_pipe(256), rows, pictures)
    lossy = eval_video.tokenizer_ceiling(_pipe(4), rows, pictures)
    assert lossless["tokenizer_ceiling_db"] == 48.13  # no error: psnr's cap (a mean squared error of one level)
    assert 5 < lossy["tokenizer_ceiling_db"] < 40 and 5 < lossy["tokenizer_ceiling_frame7_db"] < 40


def test_bf16_is_refused_on_a_cpu_that_would_emulate_it():
    import common
    import torch

    cpu = torch.device("cpu")
    with pytest.raises(SystemExit, match="no native bf16"):
        common.check_bf16(cpu, True, native=False)
    common.check_bf16(cpu, True, native=True)
    common.check_bf16(cpu, False, native=False)  # not asked for
    common.check_bf16(torch.device("cuda"), True, native=False)  # the check is the CPU's
