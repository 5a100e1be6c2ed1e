import numpy as np
import pytest
import torch
from PIL import Image

from mmspec.demo.render import accepted_lengths, commit_map, grey_out, length_histogram, run_edges

pytest.importorskip("matplotlib", reason="the demo extra is not installed: pip install -e '.[demo]'")


def test_accepted_lengths_count_tokens_per_row_and_forward():
    steps = torch.tensor([[0, 0, 0, 1, 2, 2], [0, 1, 1, 1, 1, -1]])
    assert sorted(accepted_lengths(steps).tolist()) == [1, 1, 2, 3, 4]  # row 0: 3, 1, 2; row 1: 1, 4


def test_run_edges_outline_runs_of_one_forward():
    steps = np.array([[0, 0], [1, 1]])  # two runs, one per row: one line between them
    assert run_edges(steps) == [[(-0.5, 0.5), (0.5, 0.5)], [(0.5, 0.5), (1.5, 0.5)]]
    assert len(run_edges(np.arange(4).reshape(2, 2))) == 4  # AR: every token its own run


def test_grey_out_paints_uncommitted_tokens():
    image = Image.new("RGB", (4, 4), (255, 0, 0))
    out = np.asarray(grey_out([image], torch.tensor([[[True, False], [False, False]]]))[0])
    assert (out[:2, :2] == [255, 0, 0]).all() and (out[2:, :] == 200).all() and (out[:2, 2:] == 200).all()


def test_figures_render_for_images_and_video_frames():
    steps = np.arange(2 * 3 * 4 * 4).reshape(2, 3, 4, 4) // 3
    video, image = commit_map(steps), commit_map(steps[:, :1])
    assert video.mode == "RGB" and video.width > image.width > 100
    assert length_histogram(torch.tensor([[0, 0, 1, -1]])).width > 100


def test_commit_map_greys_tokens_never_committed():
    steps = np.zeros((2, 3, 4, 4), dtype=int)
    grey = lambda image: int((np.asarray(image) == 211).all(-1).sum())  # matplotlib's lightgrey pixels
    before = grey(commit_map(steps))  # (a few in the labels' anti-aliasing)
    steps[1, 2, 3, 3] = -1
    assert grey(commit_map(steps)) - before > 300  # one token's cell
