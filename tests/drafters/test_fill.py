import torch

import random

from mmspec.drafters.fill import CopyFill, NGramFill, PoolFill, _History
from mmspec.layouts import Grid2D, Sequence1D
from mmspec.rng import Streams
from mmspec.sampling import Sampling
from mmspec.state import DecodeState
from mmspec.steps import Context


def _state(layout, window, seq, n):
    B = seq.shape[0]
    full = torch.full((B, layout.length + window), -1)
    full[:, : seq.shape[1]] = seq
    state = DecodeState(layout=layout, max_window=window, vocab_size=10, sampling=Sampling(),
                        streams=Streams(list(range(B)), 10), seq=full,
                        forced=torch.full((B, layout.length + window), -1))
    state.n = torch.tensor(n)
    return state


def _started(fill, state, prompt=None):
    fill.start(state, Context(prompt=prompt))
    return fill


def _continuation(history, max_ngram, count):
    return _History(max_ngram, history.tolist()).continuation([], count)


def _lookup_by_rule(history: list[int], max_ngram: int, count: int) -> list[int]:
    """Prompt lookup as its rule reads, by brute force: the last n tokens (n = max_ngram .. 1) matched anywhere earlier
    with a next token; of the matches, the one with the most to copy (up to count), the latest of those."""
    for n in range(min(max_ngram, len(history) - 1), 0, -1):
        hits = [i for i in range(len(history) - n) if history[i: i + n] == history[-n:]]
        if hits:
            room = [min(len(history) - i - n, count) for i in hits]
            i = [h for h, r in zip(hits, room) if r == max(room)][-1]
            return history[i + n: i + n + count]
    return []


def test_ngram_lookup_fills_as_its_rule_reads_along_a_generation_with_drafts_and_rows_cut_short():
    # a generation's calls, as lookup and a Jacobi window make them: the history grows by the commits, a call may start
    # its fresh slots after carried drafts, and a row may be cut short (a stop): the index must follow all of it
    rng = random.Random(0)
    for trial in range(40):
        B, window, N = 3, 6, 40
        prompts = [torch.tensor([rng.randrange(3) for _ in range(rng.randrange(0, 5))]) for _ in range(B)]
        state = _state(Sequence1D(N), window, torch.zeros(B, 0, dtype=torch.long), [0] * B)
        fill = NGramFill()
        fill.start(state, Context(prompt=prompts))
        for _ in range(30):
            L = rng.randrange(1, window + 1)
            carried = [rng.randrange(0, L) for _ in range(B)]
            first = state.n + torch.tensor(carried)
            for b in range(B):  # the carried drafts, as a Jacobi window leaves them
                for m in range(int(state.n[b]), int(first[b])):
                    state.seq[b, m] = rng.randrange(3)
            before = state.seq.clone()
            fill(state, first, L)
            for b in range(B):
                n, f = int(state.n[b]), int(first[b])
                history = prompts[b].tolist() + before[b, :f].tolist()
                cont = _lookup_by_rule(history, 3, max(n + L - 1 - f, 0))
                written = state.seq[b, f: n + L - 1].tolist()
                # unmatched slots copy the token on their left (from index 0 on, none: random tokens)
                left = (cont or before[b, :f].tolist())[-1:]
                assert written[: len(cont)] == cont
                assert written[len(cont):] == left * (len(written) - len(cont)) or not left
                assert state.seq[b, :f].tolist() == before[b, :f].tolist()  # nothing before the fresh slots moves
                assert int(fill.evidence[b]) == len(cont)
            k = torch.tensor([min(rng.randrange(0, 4), N - window - int(state.n[b])) for b in range(B)])
            for b in range(B):  # commit k tokens (any: the fill reads what is committed, not how it was drawn)
                for m in range(int(state.n[b]), int(state.n[b] + k[b])):
                    state.seq[b, m] = rng.randrange(3)
            state.n = state.n + k
            if rng.random() < 0.05:  # a row cut short
                b = rng.randrange(B)
                state.n[b] = rng.randrange(0, int(state.n[b]) + 1)


def test_copy_above_follows_chains_through_fresh_slots():
    layout = Grid2D(4, 2)
    state = _state(layout, 5, torch.tensor([[1, 2, 3]]), [3])  # drafts at indices 3..6
    _started(CopyFill("above"), state)(state, state.n, 5)
    # index 3 <- above 1 (=2); 4 <- 2 (=3); 5 <- 3 (fresh, =2); 6 <- 4 (fresh, =3)
    assert state.seq[0, :7].tolist() == [1, 2, 3, 2, 3, 2, 3]


def test_copy_left_repeats_the_last_known_token_and_keeps_carried_slots():
    state = _state(Sequence1D(8), 4, torch.tensor([[4, 5, 6, 7]]), [2])  # 6, 7 at indices 2, 3 are carried
    _started(CopyFill("left"), state)(state, torch.tensor([4]), 4)
    assert state.seq[0, :5].tolist() == [4, 5, 6, 7, 7]


def test_copy_left_follows_a_chain_as_long_as_the_window():
    # every one of 15 fresh slots refers to the one before it: the chain ends at the last committed token, 6
    state = _state(Sequence1D(24), 16, torch.tensor([[4, 5, 6], [1, 2, 3]]), [3, 2])
    _started(CopyFill("left"), state)(state, state.n, 16)
    assert state.seq[0, :18].tolist() == [4, 5, 6] + [6] * 15
    assert state.seq[1, :17].tolist() == [1, 2] + [2] * 15


def test_ngram_lookup_proposes_the_continuation_of_the_latest_match():
    history = torch.tensor([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2])
    assert _continuation(history, 3, 3) == [3, 8, 5]  # both matches of "1 2" are followed by 3 tokens
    state = _state(Sequence1D(12), 4, history[None, 4:], [7])
    _started(NGramFill(), state, prompt=[history[:4]])(state, state.n, 4)
    assert state.seq[0, 7:10].tolist() == [3, 8, 5]  # the prompt plus the tokens so far form the history


def test_ngram_lookup_prefers_a_match_with_more_to_copy_over_the_latest_one():
    # the latest "1 2" is followed by "1 2" and the end of the history; the earlier one by "3 4 1 2 1 2"
    history = torch.tensor([1, 2, 3, 4, 1, 2, 1, 2])
    assert _continuation(history, 3, 3) == [3, 4, 1]
    assert _continuation(history, 3, 2) == [1, 2]  # both have 2 to copy: the latest


def test_the_pool_proposes_what_followed_a_token_in_earlier_windows():
    state = _state(Sequence1D(12), 5, torch.tensor([[4, 5, 6, 5]]), [2])  # pending 5 at index 1, drafts 6 5 at 2, 3
    state.pending = torch.tensor([5])
    pool = _started(PoolFill(), state)
    pool(state, torch.tensor([4]), 5)  # learns 5 -> 6 and 6 -> 5; fresh 4 follows 5, fresh 5 follows the new 6
    assert state.seq[0, :6].tolist() == [4, 5, 6, 5, 6, 5]
    state.seq[0, 3] = 9  # a later iterate: 6 -> 9 replaces 6 -> 5, and 9 is followed by nothing seen yet
    state.n, state.pending = torch.tensor([3]), torch.tensor([6])
    pool(state, torch.tensor([5]), 5)  # learns 6 -> 9 (indices 2, 3) and 9 -> 6 (3, 4); slots 5, 6 fresh
    assert state.seq[0, 3:7].tolist() == [9, 6, 9, 6]


def test_ngram_lookup_says_how_many_slots_a_match_filled():
    state = _state(Sequence1D(12), 6, torch.tensor([[1, 2, 3, 1, 2], [4, 5, 6, 7, 8]]), [5, 5])
    fill = _started(NGramFill(), state)
    fill(state, state.n, 6)
    assert fill.evidence.tolist() == [3, 0]  # row 0: "1 2" was followed by "3 1 2", where the history ends


def test_lookup_verifies_only_the_matched_slots_and_steps_as_ar_where_nothing_matched(monkeypatch):
    import mmspec
    from mmspec.verify_step import VerifyStep
    from tiny import tiny_gpt

    target, windows = mmspec.ReferenceTarget(tiny_gpt(vocab_size=4, rope_axes=1)), []
    step = VerifyStep.__call__
    monkeypatch.setattr(VerifyStep, "__call__",
                        lambda self, state, draft, L, *rest: windows.append(L) or step(self, state, draft, L, *rest))
    out = mmspec.generate(target, torch.tensor([0]), Sequence1D(14), method="lookup", window=6, seed=0,
                          num_samples=4)
    assert len(windows) == int(out.stats.nfe.max()) and min(windows) == 1 and max(windows) <= 6
    assert windows[0] == 1  # nothing generated yet, no prompt in the target's vocabulary: nothing to match


def test_a_copy_fill_given_to_a_second_generation_with_a_wider_window_follows_its_whole_chains():
    fill = CopyFill("left")
    small = _state(Sequence1D(6), 3, torch.tensor([[4, 5]]), [2])
    _started(fill, small)(small, small.n, 3)
    assert small.seq[0, :4].tolist() == [4, 5, 5, 5]
    wide = _state(Sequence1D(24), 16, torch.tensor([[1, 2, 3]]), [3])  # a longer layout and a wider window
    _started(fill, wide)(wide, wide.n, 16)
    assert wide.seq[0, :18].tolist() == [1, 2, 3] + [3] * 15
