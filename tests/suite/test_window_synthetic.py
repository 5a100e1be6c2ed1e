"""benchmarks/window_synthetic.py's oracles: the bound on windows per row is only as good as their choices."""
from benchmarks.window_synthetic import CANDIDATES, LENGTH, MODELS, engine, oracle
from mmspec.pipelines.base import models_dir
from mmspec.window import load_prior

TOKENS = {L: [1 + (L - 1) / 4] * 8 for L in CANDIDATES}  # a row of share 1 makes 1 + (L - 1) / 4 tokens at L
PRICE = [1.0, 1.2, 1.4, 1.8]  # a row's share of a step at 1, 4, 8, 16


def test_each_row_takes_the_window_its_own_tokens_pay_for():
    # share 0: nothing past the first token at any L, so 1; share 1: 16 makes 4.75 tokens for 1.8 (AR: 1 for 1)
    assert oracle(TOKENS, PRICE, [0, 0], [0.0, 1.0], per_row=True) == [1, 16]
    # one for all: 16 pays for the pair (5.75 tokens for 3.6 against 2 for 2)
    assert oracle(TOKENS, PRICE, [0, 0], [0.0, 1.0], per_row=False) == [16, 16]
    # where a row stands matters: halfway, in a band where no window commits more than one token, 1
    assert oracle({L: [1.0] * 7 + [1 + (L - 1) / 4] for L in CANDIDATES}, PRICE, [LENGTH // 2], [1.0], True) == [1]


def test_per_row_is_never_slower_than_one_window_for_all():
    prior = load_prior(models_dir() / "emoji-image")["exact"]
    one, per_row = (engine(prior, MODELS["gpu"], 8, arm, seed=0, scale=0.34, steps=200, spread=0.9)
                    for arm in ("oracle", "per-row"))
    assert per_row[1] <= one[1] * 1.01  # seconds per token
    assert per_row[0] < one[0] == 16  # narrower windows for the rows that accept little
