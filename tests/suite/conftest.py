"""A small suite over the tiny models, run once for the suite's tests."""
import pytest

from mmspec.bench import Entry
from mmspec.suite import run_suite
from mmspec.suite.cases import GREEDY, SAMPLED, GridCase, LosslessCase, TextCase, auto_entry


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
