"""Bad input gets a clear error, never a silent wrong result."""
import pytest
import torch

import mmspec
from tiny import TabularTarget, tiny_gpt


@pytest.fixture
def target():
    return mmspec.ReferenceTarget(tiny_gpt())


def gen(target, layout=None, **kw):
    return mmspec.generate(target, torch.tensor([0]), layout or mmspec.Grid2D(3, 3), **kw)


def test_unknown_method(target):
    with pytest.raises(ValueError, match="unknown method 'speculate'.*coupled"):
        gen(target, method="speculate")
    with pytest.raises(ValueError, match="bad options"):
        gen(target, method={"name": "coupled", "windo": 3})
    with pytest.raises(ValueError, match="unknown fill policy 'diagonal'"):
        gen(target, method={"name": "jacobi", "init": "diagonal"})
    with pytest.raises(ValueError, match="needs a draft model"):
        gen(target, method="draft-model")


def test_cfg_without_a_null_condition():
    target = TabularTarget(3, 4, null=False)
    with pytest.raises(ValueError, match="null condition"):
        mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(4), sampling={"cfg_scale": 3.0})


def test_wrong_layout(target):
    with pytest.raises(ValueError, match="position axes"):
        gen(target, mmspec.Sequence1D(9))
    with pytest.raises(ValueError, match="block_size"):
        gen(target, mmspec.Grid2D(9, 9))
    with pytest.raises(ValueError, match="table covers"):
        mmspec.generate(TabularTarget(3, 4), torch.tensor([0]), mmspec.Sequence1D(5))
    with pytest.raises(ValueError, match="positive int"):
        mmspec.Grid2D(0, 4)
    with pytest.raises(ValueError, match="positive int, got True"):
        mmspec.Sequence1D(True)
    with pytest.raises(TypeError, match="layout must be"):
        mmspec.generate(target, torch.tensor([0]), (3, 3))


@pytest.mark.parametrize("window", [0, -1, 257, 2.5])
def test_window_out_of_range(target, window):
    with pytest.raises(ValueError, match="window must be"):
        gen(target, window=window)


def test_nan_logits_raise():
    model = tiny_gpt()
    with torch.no_grad():
        model.output.weight[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN"):
        gen(mmspec.ReferenceTarget(model), method="coupled")


def test_bad_sampling_seed_and_condition(target):
    with pytest.raises(ValueError, match="unknown sampling options"):
        gen(target, sampling={"temp": 1.0})
    with pytest.raises(ValueError, match="top_p"):
        gen(target, sampling={"top_p": 1.5})
    with pytest.raises(ValueError, match="cfg_mode"):
        gen(target, sampling={"cfg_mode": "softmax"})
    with pytest.raises(ValueError, match="seeds for 2 rows"):
        gen(target, seed=[1, 2, 3], num_samples=2)
    with pytest.raises(ValueError, match="class condition"):
        mmspec.generate(target, torch.tensor([[0, 1]]), mmspec.Grid2D(3, 3))
    with pytest.raises(ValueError, match="class condition"):
        mmspec.generate(target, torch.tensor([9]), mmspec.Grid2D(3, 3))


def test_draft_model_with_another_vocabulary(target):
    other = mmspec.ReferenceTarget(tiny_gpt(vocab_size=8))
    with pytest.raises(ValueError, match="vocabulary"):
        gen(target, method={"name": "draft-model", "model": other})


@pytest.mark.parametrize("bad", [{"temperature": float("nan")}, {"cfg_scale": float("nan")},
                                 {"temperature": float("inf")}, {"cfg_scale": float("inf")}, {"temperature": -1.0},
                                 {"top_k": 2.5}, {"top_k": True}, {"top_p": float("nan")}, {"top_p": 0.0}])
def test_non_finite_or_ill_typed_sampling_is_refused(target, bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        gen(target, sampling=bad)


def test_a_window_policy_that_oversteps_is_refused(target):
    class TooWide:
        max_window, in_step = 4, False

        def start(self, session, state):
            pass

        def __call__(self, state):
            return 5

        def observe(self, state, k, seconds):
            pass

    with pytest.raises(ValueError, match="asked for 5 positions; it allows 1..4"):
        gen(target, window=TooWide())
    with pytest.raises(ValueError, match="window must be"):
        gen(target, window=lambda state: 3)  # a policy needs max_window


# What a user of the command line meets: a broken model folder or input file is one line naming the file and
# what to do, exit status 2, no traceback (--debug shows it).

def _broken_copy(tiny_models, tmp_path, kind="image"):
    import shutil

    shutil.copytree(tiny_models, tmp_path / "models")
    return tmp_path / "models" / kind


def _truncate_weights(folder):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _drop_layout(folder):
    import json

    config = json.loads((folder / "config.json").read_text())
    del config["layout"]
    (folder / "config.json").write_text(json.dumps(config))


def _lose_tokenizer(folder):
    import shutil

    shutil.rmtree(folder.parent / "vq")


def _set_gpt(**fields):
    def breaks(folder):
        import json

        config = json.loads((folder / "config.json").read_text())
        config["gpt"].update(fields)
        (folder / "config.json").write_text(json.dumps(config))
    return breaks


@pytest.mark.parametrize("breaks, names", [
    (_set_gpt(n_layer="six"), ["config.json", "n_layer must be int, got 'six'"]),
    (_set_gpt(norm_eps=None), ["config.json", "norm_eps must be float, got None"]),
    # a dim that passes the rotary check but that the weights do not have: 4 TB of weights, refused from the header
    (_set_gpt(dim=1 << 20), ["do not match the config", "(32, 24) vs config (32, 1048576)"]),
    (_truncate_weights, ["model.safetensors", "truncated or corrupt", "copy or download it again"]),
    (_drop_layout, ["config.json", "lacks 'layout'"]),
    (_lose_tokenizer, ["config.json", "names tokenizer '../vq'", "no folder at"]),
])
def test_a_broken_model_folder_is_one_line_and_exit_2(tiny_models, tmp_path, capsys, breaks, names):
    from mmspec.cli import main

    folder = _broken_copy(tiny_models, tmp_path)
    breaks(folder)
    argv = ["generate", "image", "red heart", "--model", str(folder), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("mmspec: error: ") and "Traceback" not in err, err
    assert all(name in err for name in names), err
    with pytest.raises((ValueError, FileNotFoundError)):  # --debug: the exception itself, with its traceback
        main(argv + ["--debug"])


def test_an_image_file_that_is_not_an_image_is_one_line_and_exit_2(tiny_models, tmp_path, capsys):
    from mmspec.cli import main

    notes = tmp_path / "notes.png"
    notes.write_text("meeting notes, renamed")
    assert main(["generate", "video", "bounce apple", "--model", str(tiny_models / "video"), "--image", str(notes),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"image {notes} is not an image file" in err, err


def test_unknown_prompt_words_are_named_once(tiny_models):
    import warnings

    pipe = mmspec.ImagePipeline.from_pretrained(tiny_models / "image")
    with pytest.warns(UserWarning, match=r"does not know 'elephant', 'purple', 'skateboarding' \(it reads them as"):
        pipe("purple elephant skateboarding", method="ar")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe("red heart, purple elephant", method="ar")  # known words, and unknown ones already named


@pytest.mark.parametrize("argument, value, message", [
    ("prompt", None, "prompt must be a string or a non-empty list of strings, got None"),
    ("prompt", 123, "prompt must be a string or a non-empty list of strings, got 123"),
    ("prompt", ["red heart", 7], r"prompt must be a string or a non-empty list of strings, got \['red heart', 7\]"),
    ("seed", "a", r"seed must be an int or a list of ints \(one per output\), got 'a'"),
    ("seed", 1.5, r"seed must be an int or a list of ints \(one per output\), got 1.5"),
    ("seed", [1, 2], "seed: got 2 seeds for 1 rows"),
    ("num_outputs", "2", "num_outputs must be an int >= 1, got '2'"),
    ("num_outputs", 0, "num_outputs must be an int >= 1, got 0"),
    ("on_commit", 3, r"on_commit must be a function on_commit\(state, k\) or None, got 3"),
    ("compile", "yes", "compile must be True, False or a dict of torch.compile's options, got 'yes'"),
    ("progress_bar", "x", "progress_bar must be True or False, got 'x'"),
])
def test_every_pipeline_argument_is_checked_in_one_line_that_names_it(tiny_models, argument, value, message):
    pipe = mmspec.ImagePipeline.from_pretrained(tiny_models / "image", window_cache="off")
    with pytest.raises((TypeError, ValueError), match=f"^{message}"):
        pipe(**{"prompt": "red heart", "method": "ar", argument: value})
