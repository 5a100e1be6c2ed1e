"""Shared fixtures; tests import their tiny components from tiny.py beside this file."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

import mmspec  # noqa: E402
import mmspec.threads  # noqa: E402
from mmspec.reference.checkpoint import save_gpt  # noqa: E402

# no more CPU threads than the cores free: where other work holds a core, torch's threads wait on each other at every
# op (the suite ran 6x slower beside one busy process); on a quiet machine the law tests' large batches use them all.
# Under pytest-xdist (`-n`), the workers share the cores: each takes its share, decided here, not by who started first
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    torch.set_num_threads(max(1, mmspec.threads.cores() // WORKERS))
else:
    mmspec.threads.use_cpu_threads()


@pytest.fixture(autouse=True)
def suite_threads(monkeypatch):
    """The CLI in a test keeps the threads chosen above (as OMP_NUM_THREADS makes it): it would otherwise count the
    other worker as a busy core and print its notice, which the tests of one-line errors would count as a line."""
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))


@pytest.fixture(autouse=True)
def window_cache(tmp_path_factory, monkeypatch):
    """Pipelines keep auto windows' measurements on disk: in a folder of each test, not the user's, so that no
    test starts from what another one measured."""
    folder = tmp_path_factory.mktemp("windows")
    monkeypatch.setenv("MMSPEC_WINDOW_CACHE", str(folder))
    return folder


def _vq(folder):
    from diffusers import VQModel

    torch.manual_seed(0)
    vq = VQModel(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                 up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, latent_channels=8,
                 num_vq_embeddings=32, vq_embed_dim=4, norm_num_groups=32)
    vq.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    _vq(root / "vq")
    vocab = ["<pad>", "<unk>", "red", "heart", "bounce", "apple"]
    for name, axes, layout in (("image", 2, {"type": "Grid2D", "shape": [4, 4]}),
                               ("video", 3, {"type": "Grid3D", "shape": [3, 2, 2]})):
        torch.manual_seed(1)
        gpt = mmspec.GPT(mmspec.GPTConfig(vocab_size=32, dim=24, n_layer=2, n_head=2, multiple_of=16, rope_axes=axes,
                                          block_size=16, cond_vocab_size=len(vocab), cond_len=4, cond_rope="identity"))
        save_gpt(gpt, root / name, dtype=torch.bfloat16, layout=layout, tokenizer="../vq", prompt_vocab="vocab.json",
                 default_sampling={"temperature": 1.0, "top_k": 20, "cfg_scale": 2.0})
        (root / name / "vocab.json").write_text(json.dumps(vocab))
    shutil.copytree(root / "video", root / "video-from-text")  # frame 0 rendered by the image model
    config = json.loads((root / "video-from-text" / "config.json").read_text())
    (root / "video-from-text" / "config.json").write_text(json.dumps({**config, "first_frame_model": "../image",
                                                                       "first_frame_staging": "emoji-sprite"}))
    return root


@pytest.fixture(scope="session")
def tiny_text(tmp_path_factory):
    from tiny import tiny_llama, word_tokenizer

    root = tmp_path_factory.mktemp("text")
    for name, layers, hidden, seed in (("target", 2, 32, 0), ("draft", 1, 16, 5)):
        tiny_llama(layers=layers, hidden=hidden, seed=seed, dtype=torch.float32).save_pretrained(root / name)
        word_tokenizer().save_pretrained(root / name)
    return root


@pytest.fixture(scope="session")
def tiny_heads(tiny_models, tiny_text, tmp_path_factory):
    """Copies of the tiny image, video and text models (text: the target) with a random draft head in head/, as
    method eagle finds a bundled model's; video-from-text has none."""
    from tiny import tiny_head
    from mmspec.reference.eagle import save_head

    root = tmp_path_factory.mktemp("heads")
    shutil.copytree(tiny_models, root, dirs_exist_ok=True)
    shutil.copytree(tiny_text / "target", root / "text")
    for name, axes in (("image", 2), ("video", 3)):
        save_head(tiny_head(32, 24, rope_axes=axes), root / name / "head")
    save_head(tiny_head(40, 32), root / "text" / "head")
    return root
