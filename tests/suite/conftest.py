"""Small suites over the tiny models, run once for the suite's tests."""
import pytest

from mmspec.bench import Entry
from benchmarks.suite import run_suite
from benchmarks.suite.cases import (GREEDY, HOT, SAMPLED, CountCase, GridCase, LosslessCase, TextCase, auto_entry,
                                   spec_label)


@pytest.fixture(scope="session")
def tiny_suite(tiny_models, tiny_text):
    cases = [GridCase("image", n, (Entry("exact"), auto_entry("image")), "rows", repeats=1) for n in (1, 2)]
    cases += [GridCase("video", 1, (Entry("coupled", 4), Entry("exact", 4), Entry("coupled", 8), Entry("exact", 8)),
                       "window", repeats=1),
              LosslessCase("video", 2, (Entry("coupled"), Entry("exact"), auto_entry("video"))),
              TextCase(1, GREEDY, ("ar", "lookup"), ("generate", "prompt-lookup"), prompts=2, repeats=1),
              TextCase(2, SAMPLED, ("ar", "draft-model"), ("generate", "assisted"), prompts=2, repeats=1)]
    models = {"image": tiny_models / "image", "video": tiny_models / "video", "text": tiny_text / "target"}
    lines = []
    result = run_suite(cases, models=models, draft=tiny_text / "draft", max_new_tokens=5, log=lines.append)
    return result, lines


def _sweep(methods, windows):
    return (Entry("ar"),) + tuple(Entry(m, w, f"{spec_label(m)} w={w}") for m in methods for w in windows)


@pytest.fixture(scope="session")
def tiny_acceptance(tiny_models, tiny_text, tiny_heads):
    """The acceptance suite's kinds of case on the tiny models: 4x4 images (with a draft head, which the 1-row runs
    use), 3-frame 2x2 videos whose frame 0 the image model draws (4 given tokens of 12), text with a draft model;
    default windows 16, 64 and 6. Last, the image 1-row runs again at HOT over the model's default sampling
    (temperature 1, top-k 20, CFG 2)."""
    grid = ("coupled", "exact", "lookup", {"name": "coupled", "init": "above"})
    single = _sweep(grid[:3] + ({"name": "eagle", "exact": True, "jacobi": 1},), (16,))
    cases = [CountCase("image", 2, 2, _sweep(grid, (4, 16))),
             CountCase("image", 2, 1, single, one_row=True),
             CountCase("video", 2, 2, _sweep(grid[:3], (4, 64))),
             CountCase("text", 2, 2, _sweep(("draft-model", "lookup"), (4, 6)), sampling=SAMPLED),
             CountCase("image", 2, 1, single, one_row=True, sampling=HOT, over_default=True)]
    models = {"image": tiny_heads / "image", "video": tiny_models / "video-from-text", "text": tiny_text / "target"}
    lines = []
    result = run_suite(cases, models=models, draft=tiny_text / "draft", max_new_tokens=5, log=lines.append)
    return result, lines
