"""Window policies: `auto` picks the window that pays, and any window sequence stays lossless."""
import json

import pytest
import torch

import mmspec
import mmspec.window
from mmspec.window import AcceptanceWindow, AutoConfig, AutoWindow, WindowMemory, load_prior, prior_at
from tiny import TabularTarget, chi_square_pvalue, sequence_id, tabular_law, tiny_gpt

POW4 = [1, 4, 16, 64]  # the candidates most policy tests are written with (the default adds 8, 32, ...)


class FakeState:
    def __init__(self, rows=2):
        self.seq = torch.zeros(rows, 4, dtype=torch.long)
        self.batch_size, self.running, self.length = rows, rows, 10**6
        self.n = torch.zeros(rows, dtype=torch.long)
        self.pending = torch.full((rows,), -1)
        self.active = torch.ones(rows, dtype=torch.bool)
        self.sampling = mmspec.Sampling(cfg_scale=2.0)
        self.groups = None  # the whole batch one group

    def index(self, L):
        return self.n[:, None] + torch.arange(L)

    def gumbel_max(self, logp, index):
        return logp.argmax(-1)


def _step(policy, state, k, seconds):
    """One step as the loop runs it: commit k [B], then tell the policy."""
    state.n += k
    policy.observe(state, k, seconds)


def _run(policy, steps, seconds_of, k_of, state=None):
    """Drive a policy as the loop does, with a step cost seconds_of(L) and commits k_of(L) per row."""
    state, chosen = state or FakeState(), []
    for _ in range(steps):
        L = policy(state)
        chosen.append(L)
        _step(policy, state, torch.full((state.batch_size,), k_of(L)), seconds_of(L))
    return chosen


def test_auto_stops_widening_when_it_does_not_pay_and_keeps_plain_ar():
    chosen = _run(AutoWindow(max_window=16, candidates=POW4), 320, seconds_of=lambda L: 0.01 * L ** 0.5, k_of=lambda L: 1)
    # 4 runs a stretch (2 warm-up steps, 4 measured); 16 never does: its cost, extrapolated from 1 and 4, would
    # need 6 tokens per step to beat AR, more than 2.5 times what 4 gave
    assert chosen[:10] == [1] * 4 + [4] * 6 and 16 not in chosen
    rechecks = [i for i in range(10, 320) if chosen[i] == 4 and chosen[i - 1] == 1]
    assert len(rechecks) == 2 and rechecks[1] - rechecks[0] > rechecks[0] - 10  # each loss doubles the wait


def test_auto_goes_wide_when_a_forward_costs_the_same_at_any_width_and_drafts_are_accepted():
    chosen = _run(AutoWindow(max_window=16, candidates=POW4), 40, seconds_of=lambda L: 0.01, k_of=lambda L: L)
    assert chosen[:18] == [1] * 4 + [4] * 6 + [16] * 8 and chosen[18:40] == [16] * 22  # 16: 4 warm-up steps


def test_auto_does_not_recheck_a_wider_neighbour_that_cannot_pay():
    # a step costs 1 + L/8 and commits min(L, 10): 16 is best (10 / 3 tokens per second); 64 never runs, in
    # exploration nor as the best L's neighbour: its cost, extrapolated from 4 and 16, would need 30 tokens per
    # step, 3 times what 16 gives (at 8 rows, a stretch of 64 with its warm-up cost more than it could ever win)
    chosen = _run(AutoWindow(max_window=64, candidates=POW4), 300, seconds_of=lambda L: 1 + L / 8, k_of=lambda L: min(L, 10))
    assert 64 not in chosen and chosen.count(16) > 250


def test_auto_balances_cost_and_acceptance():
    # each row commits min(3, L); a step costs 1 + L/16: tokens per second 1 / 1.06 at L = 1, 3 / 1.25 at
    # L = 4, 3 / 2 at L = 16
    chosen = _run(AutoWindow(max_window=16, candidates=POW4), 40, seconds_of=lambda L: 1 + L / 16, k_of=lambda L: min(3, L))
    assert 16 in chosen[:18] and chosen[-20:] == [4] * 20


@pytest.mark.parametrize("groups", [None, [0, 1]], ids=["one batch", "rows alone"])
def test_auto_counts_the_row_furthest_behind_a_batch_ends_with_it(groups):
    # one row accepts every draft, the other none: wide windows let the first race ahead, but the batch still
    # takes one step per token of the second, so AR (the cheapest step) wins; where each row counts alone (an
    # engine's rows that give their places to rows waiting) the first's tokens count, and 16 wins (8.5 tokens a step
    # for twice AR's time)
    policy, state = AutoWindow(max_window=16, candidates=POW4), FakeState()
    state.groups = groups
    chosen = []
    for _ in range(80):
        L = policy(state)
        chosen.append(L)
        _step(policy, state, torch.tensor([L, 1]), 0.01 * (1 + L / 16))
    if groups is None:
        assert chosen[-40:].count(1) > 30
    else:
        assert chosen[-40:].count(16) > 30 and policy.group == 1 and policy.config.margin == AutoConfig().margin


def test_batch_progress_is_the_mean_of_each_group_s_rearmost_advance():
    state = FakeState(rows=4)
    state.n = torch.tensor([5, 9, 4, 7])  # after the step, which committed k: from 2, 8, 2, 7
    k = torch.tensor([3, 1, 2, 0])  # (the last row waited in step: active, nothing committed)
    assert mmspec.window.batch_progress(state, k) == (2, 2)  # one group: the least length went from 2 to 4
    state.groups = [0, 0, 1, 1]
    assert mmspec.window.batch_progress(state, k) == (2.5, 2)  # 2 -> 5 and 2 -> 4
    state.groups = [0, 1, 2, 3]
    assert mmspec.window.batch_progress(state, k) == (1.5, 2)  # each row's own: 3, 1, 2, 0
    state.active[3] = False  # (a row that is done takes no part)
    assert mmspec.window.batch_progress(state, k) == (2, 2)


class Progress(mmspec.window.FixedWindow):
    """A fixed window that adds up what `batch_progress` counts, and what the old count (the tokens the row furthest
    behind committed) would have."""

    def __init__(self, window):
        super().__init__(window)
        self.progress, self.steps, self.rearmost = 0, 0, 0

    def observe(self, state, k, seconds):
        tokens, start = mmspec.window.batch_progress(state, k)
        self.progress, self.steps = self.progress + tokens, self.steps + 1
        before = torch.where(k > 0, state.n - k, state.length)
        self.rearmost += int(k[before == start].min())


@pytest.mark.parametrize("window", [4, 8])
def test_batch_progress_adds_up_to_the_output_as_rows_finish_apart(window):
    """The rearmost row's progress sums to N over a batch's steps (so N / steps is its mean, what a batch runs at a
    fixed L), while rows finish apart and leave; the tokens of the row furthest behind, counted before, sum
    to more (6-12% here: 8 samples of one class overtake one another): they credit bursts that only leave another
    row behind."""
    layout = mmspec.Grid2D(8, 8)
    policy = Progress(window)
    g = mmspec.generate(mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, block_size=128)), torch.tensor([0]), layout,
                        method="coupled", num_samples=8, window=policy, seed=0, sampling={"temperature": 0.5})
    assert len(set(g.stats.nfe.tolist())) > 2  # rows finished apart
    assert policy.progress == layout.length and policy.steps == g.stats.total_nfe
    assert policy.rearmost > 1.05 * layout.length


def test_auto_judges_each_width_by_its_own_steps():
    # a wide window's first slots carry more Jacobi iterations than a narrow window ever gives its own: here 16
    # commits 6 per step and 4 only 2. Crediting 4 with min(6, 4) for each step at 16 would make 4 look better than
    # 16 and run it; by their own steps, 4 gives 2 / 0.01 = 200 tokens/s and 16 gives 6 / 0.025 = 240
    policy = AutoWindow(max_window=16, candidates=POW4)
    chosen = _run(policy, 200, seconds_of=lambda L: {1: 0.008, 4: 0.01, 16: 0.025}[L],
                  k_of=lambda L: {1: 1, 4: 2, 16: 6}[L])
    assert policy.estimate.per_step(4)[0] == pytest.approx(2.0) and chosen[-100:].count(16) > 80


def test_auto_keeps_the_running_window_unless_another_wins_clearly():
    # every L costs the same; 16 accepts all it drafts until step 100, then its rows commit 4 per step like
    # 4's (a tie: the running 16 stays, where picking the narrower on a tie would switch on a stretch's luck),
    # and from step 350 only 2 (4 now wins clearly: it takes over)
    policy, state = AutoWindow(max_window=16, candidates=POW4), FakeState()
    chosen = []
    for step in range(600):
        L = policy(state)
        chosen.append(L)
        k = L if step < 100 else min(L, 4) if step < 350 else {16: 2}.get(L, min(L, 4))
        _step(policy, state, torch.full((2,), k), 0.01)
    assert chosen[30:100].count(16) > 60 and chosen[300:350].count(16) > 40 and chosen[-100:].count(4) > 70


def test_auto_follows_acceptance_that_changes_along_a_generation():
    policy, state = AutoWindow(max_window=16, candidates=POW4), FakeState()
    chosen = []
    for step in range(300):
        L = policy(state)
        chosen.append(L)
        accepted = step > 80  # drafts start paying off later (a video's later frames)
        _step(policy, state, torch.full((2,), L if accepted else 1), 0.01 * (1 + L / 8))
    assert chosen[40:80].count(1) > 30 and chosen[-40:].count(16) > 30


@pytest.mark.parametrize("seconds_of, probed, best",
                         [(lambda L: 0.002, [1, 4, 16], 16), (lambda L: 0.0005 * L, [1, 4], 1)],
                         ids=["flat-cost", "cost-grows-with-L"])
def test_auto_with_a_prior_probes_step_costs_and_runs_the_best_window(seconds_of, probed, best):
    # the prior: 3 tokens per step at 16, 1.5 at 4. Steps that cost the same at every L make 16 best after four
    # steps of each L (an L's first is not timed); steps that cost L times more make plain AR best
    # (3 / 16 < 1.5 / 4 < 1 / 1), and 16 is not even probed: at the cost of 4 it would give 3 / 4 < 1 / 1
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={1: {1: 1.0, 4: 1.5, 16: 3.0}}))
    chosen = _run(policy, 40, seconds_of=seconds_of, k_of=lambda L: {1: 1, 4: 2, 16: 3}[L])
    probes = sum(([L] * 4 for L in probed), [])
    assert chosen[:len(probes)] == probes and chosen[len(probes):] == [best] * (40 - len(probes))


def test_auto_corrects_a_wrong_prior_by_measurement():
    # the prior promises 8 tokens per step at 16, but no draft is ever accepted: 16 runs after its probe, then
    # measurement takes the policy down to plain AR, the cheapest step
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={1: {1: 1.0, 4: 2.0, 16: 8.0}}))
    chosen = _run(policy, 400, seconds_of=lambda L: 0.01 * (1 + L / 16), k_of=lambda L: 1)
    assert chosen[12] == 16 and chosen[-100:].count(1) > 80


@pytest.mark.parametrize("one_row", [2, 1])
def test_at_one_row_a_stretch_lasts_until_a_jacobi_window_has_caught_up(one_row):
    # a Jacobi window opened after plain AR commits one token a step for its first 6 steps, then 3 (held, 16 is 1.5x
    # AR: 3 per 6.6 ms against 1 per 3.3). A stretch of 4 counted steps after a warm-up of 4 sees 1, 1, 3, 3, a tie
    # with AR, and 16 never runs; one of 8 sees the catch-up, and 16 runs (`one_row`: 1 is the variant that fails)
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={1: {1: 1.0, 4: 1.3, 16: 2.0}}),
                        config=AutoConfig(one_row=one_row))
    seconds, state, chosen, run = {1: 0.0033, 4: 0.0046, 16: 0.0066}, FakeState(rows=1), [], 0
    for _ in range(600):
        L = policy(state)
        run = run + 1 if chosen and chosen[-1] == L else 1
        chosen.append(L)
        _step(policy, state, torch.tensor([{1: 1, 4: 1, 16: 1 if run <= 6 else 3}[L]]), seconds[L])
    assert (chosen[-200:].count(16) > 120) == (one_row == 2)


def test_with_a_prior_a_stretch_in_an_easy_region_does_not_beat_a_width_measured_in_a_hard_one():
    # emoji-image at 1 row: after its probes 16 runs, and its first 48 steps fall in a hard region of the image (1.5
    # tokens per step), the recheck of 4 after them in an easy one (2 per step). Judged by their own steps 4 looks
    # 1.7x better and takes over; but in the easy region 16 commits 3 per step and is the better L (517 vs 435
    # tokens/s). With the prior's shape, both stretches measure one scale of acceptance, and 16 stays.
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={1: {1: 1.0, 4: 1.3, 16: 1.9}}))
    seconds = {1: 0.0040, 4: 0.0046, 16: 0.0058}
    state = FakeState(rows=1)
    chosen = []
    for step in range(150):
        L = policy(state)
        chosen.append(L)
        k = {1: 1, 4: 2, 16: 3}[L] if step >= 55 else {1: 1, 4: 1, 16: 1 + step % 2}[L]
        _step(policy, state, torch.full((1,), k), seconds[L])
    # (the rest: stretches of other candidates, of 8 counted steps at one row; 4 taking over would leave 16 about 20)
    assert chosen[12:55] == [16] * 43 and chosen[61:].count(16) > 65


@pytest.mark.parametrize("by_band", [True, False], ids=["by-band", "overall"])
def test_with_a_prior_by_band_auto_runs_plain_ar_where_the_output_is_hard_and_goes_wide_where_it_is_easy(by_band):
    # emoji-image at 1 row: AR 3.3 ms, 4 4.6 ms, 16 5.7 ms a step; 16 commits 1.5 tokens per step in the first band
    # (the top rows: AR's 1 / 3.3 ms wins) and 3 below (16 wins by 1.6x). With the prior by band, AR runs through the
    # first band after its probes, without a step of 16, and 16 runs from the second band on. With the prior's
    # overall figure (2.4 at 16) the policy runs 16 in the hard band, where its steps pull the pooled scale down.
    seconds = {1: 0.0033, 4: 0.0046, 16: 0.0057}
    bands = {1: [1.0] * 8, 4: [1.2] + [1.6] * 7, 16: [1.5] + [2.5] * 7}
    prior = {1: bands if by_band else {L: sum(b) / 8 for L, b in bands.items()}}
    policy, state = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior=prior)), FakeState(rows=1)
    state.length = 256
    chosen, first_band = [], 0
    while int(state.n[0]) < 200:
        L = policy(state)
        chosen.append(L)
        hard = int(state.n[0]) < 32
        first_band += hard
        k = {1: 1, 4: 1, 16: 1 + len(chosen) % 2}[L] if hard else {1: 1, 4: 2, 16: 3}[L]
        _step(policy, state, torch.tensor([k]), seconds[L])
    if by_band:
        assert chosen[:8] == [1] * 4 + [4] * 4 and set(chosen[8:first_band]) == {1}
        assert chosen[first_band + 8:].count(16) > 0.9 * len(chosen[first_band + 8:])
    else:  # (the variant the band prior fixes: 16 runs in the hard band)
        assert 16 in chosen[8:first_band]


def test_auto_candidates_are_checked_and_include_plain_ar():
    assert AutoWindow(max_window=20).candidates == [1, 4, 8, 16, 20]  # the widest always a candidate
    assert AutoWindow(max_window=16, candidates=[1, 2, 16]).candidates == [1, 2, 16]
    for bad in ([4, 16], [1, 0, 8], [1, 2.5]):
        with pytest.raises(ValueError, match="candidates must be positive ints including 1"):
            AutoWindow(max_window=16, candidates=bad)


def test_auto_finds_a_best_width_between_powers_of_four():
    # emoji-video at 8 rows: 8 positions a step win over 4 and 16 (costs as timed there; tokens of the row furthest
    # behind, rounded); the default candidates double from 4 on, so 8 is probed and runs, and 32 and 64, which cannot
    # win at the least their steps can cost, never run
    seconds = {1: 0.008, 4: 0.012, 8: 0.016, 16: 0.028, 32: 0.060, 64: 0.11}
    tokens = {1: 1, 4: 2, 8: 3, 16: 4, 32: 6, 64: 8}
    policy = AutoWindow(max_window=64, memory=WindowMemory(prior={8: tokens}))
    chosen = _run(policy, 200, seconds_of=seconds.get, k_of=tokens.get, state=FakeState(rows=8))
    assert chosen[:12] == [1] * 4 + [4] * 4 + [8] * 4 and 32 not in chosen and 64 not in chosen
    assert chosen[16:].count(8) > 0.75 * len(chosen[16:])  # (the rest: rechecks of the candidates close to it)


def test_at_a_batch_auto_never_probes_past_a_narrower_width_that_could_not_win():
    # emoji-video at 8 rows late in a clip: the prior's band says 64 commits 20 where 32 commits 4.5, and the line
    # through the costs of 8 and 16 puts 64 at 89 ms: by that line 64 could win (0.22 tokens/ms against 8's 0.19)
    # although 32, on the same line, cannot. A step of 64 costs 140 ms there: a batch's step cost is no surer than
    # the prior's tokens, so an L is judged only once every narrower one was timed
    seconds = {1: 0.008, 4: 0.012, 8: 0.016, 16: 0.028, 32: 0.060, 64: 0.14}
    tokens = {1: 1, 4: 2, 8: 3, 16: 4, 32: 4.5, 64: 20}
    policy = AutoWindow(max_window=64, memory=WindowMemory(prior={8: tokens}))
    chosen = _run(policy, 200, seconds_of=seconds.get, k_of=lambda L: int(tokens[L]), state=FakeState(rows=8))
    assert chosen[:12] == [1] * 4 + [4] * 4 + [8] * 4 and 32 not in chosen and 64 not in chosen


@pytest.mark.parametrize("memory", [WindowMemory, lambda: None], ids=["memory", "no-memory"])
@pytest.mark.parametrize("seconds_of_8, switches", [(0.0225, False), (0.0205, True)])
def test_at_a_batch_a_width_takes_over_only_if_it_wins_by_15_percent(seconds_of_8, switches, memory):
    # 8 rows: 8 commits 3 per step, AR 1 per 8.5 ms. At 22.5 ms a step 8 is 13% faster than AR, within what a few
    # bursty steps of a batch's row furthest behind can fake (a one-row margin of 5% would switch); at 20.5 ms, 24%.
    # Without a memory too (mmspec.generate on a target of one's own)
    policy = AutoWindow(max_window=8, candidates=[1, 8], memory=memory())
    seconds = {1: 0.0085, 8: seconds_of_8}
    chosen = _run(policy, 200, seconds_of=seconds.get, k_of={1: 1, 8: 3}.get, state=FakeState(rows=8))
    assert (chosen[-100:].count(8) > 80) == switches and chosen[-100:].count(8) > 0  # (rechecks)


def test_at_a_batch_auto_explores_no_width_that_could_not_win_by_its_margin():
    # LlamaGen GPT-B at 8 rows, random weights, 1 thread (benchmarks/README.md): a step of 1 / 4 took 115 / 239 ms and
    # 4 moved the batch 1.5 tokens a step. The line through them puts 8 at 404 ms, 3.5 AR steps: 8 would need 3.5
    # tokens a step to tie AR, 4.0 to win by the 15% it needs to take over, more than 2.5x what 4 gave
    seconds, k_of = {1: 0.115, 4: 0.239, 8: 0.386}, _whole({1: 1.0, 4: 1.5, 8: 2.7})
    chosen = _run(AutoWindow(max_window=8, candidates=[1, 4, 8]), 100, seconds_of=seconds.get, k_of=k_of,
                  state=FakeState(rows=8))
    assert 4 in chosen and 8 not in chosen


def _whole(tokens):
    """k_of for a mean of `tokens` [L] per step: whole tokens, 1 or 2, that add up to it."""
    total = dict.fromkeys(tokens, 0.0)

    def k_of(L):
        total[L] += tokens[L]
        return int(total[L]) - int(total[L] - tokens[L])
    return k_of


@pytest.mark.parametrize("rows", [32, 8])
def test_at_a_batch_auto_narrows_to_plain_ar_once_ar_wins_by_any_margin(rows):
    # AR 5.3 ms a step; 16 commits 1.9 tokens a step and for its first 100 steps costs 8 ms (26% ahead of AR), then
    # at 32 rows 11.2 ms: AR is 11% ahead, less than the 15% a wider L needs to take over, but AR's one token a
    # step is certain, so 16 gives way (it stayed before). At 8 rows a step of 16 goes on at 7.5 ms and 16 stays.
    k_of, wide = _whole({1: 1.0, 16: 1.9}), 0.0112 if rows == 32 else 0.0075
    policy, state, chosen = AutoWindow(max_window=16, candidates=[1, 16], memory=WindowMemory()), FakeState(rows), []
    for step in range(400):
        L = policy(state)
        chosen.append(L)
        _step(policy, state, torch.full((rows,), k_of(L)), 0.0053 if L == 1 else 0.008 if step < 100 else wide)
    assert chosen[20:100].count(16) > 60
    assert chosen[-100:].count(1 if rows == 32 else 16) > 80


def test_at_a_batch_plain_ar_timed_dear_at_the_start_is_timed_again():
    # emoji-image at 32 rows on the H200 (cf730a6): AR 5.27 ms a step, a batch step of 16 7.04 ms for 1.12 tokens
    # (AR 19% ahead), where the prior expects 1.32. Here AR's probe, the generation's first steps, costs 1.6x (a
    # cold start): by it and the prior 16 wins. Once measurement brings 16 down to 1.12 tokens, AR's stale cost
    # still puts it 25% behind, beyond `hope`, and before it was never timed again: 16 ran to the end
    k_of, cold = _whole({1: 1.0, 16: 1.12}), iter([1.6] * 4)
    policy = AutoWindow(max_window=16, candidates=[1, 16], memory=WindowMemory(prior={32: {1: 1.0, 16: 1.32}}))
    chosen = _run(policy, 300, seconds_of=lambda L: 0.00527 * next(cold, 1.0) if L == 1 else 0.00704, k_of=k_of,
                  state=FakeState(rows=32))
    assert chosen[:4] == [1] * 4 and chosen[8:40].count(16) == 32 and chosen[-100:].count(1) > 80


def test_at_one_row_auto_tries_every_width_even_when_the_scale_says_it_cannot_win():
    # emoji-image at 1 row: by the prior 16 barely wins (1.8 tokens per 5.7 ms against AR's 1 per 3.3), but the
    # first 60 steps are hard (nothing accepted): the probes of 4 pull the scale down until 16 cannot win, and it
    # is never timed. Plain AR measures no acceptance, so only a stretch of 16 itself can find the easy region
    # after them, where 16 commits 4 per step (2.1x AR) and 4 still 1: at one row it gets one
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={1: {1: 1.0, 4: 1.3, 16: 1.8}}))
    seconds = {1: 0.0033, 4: 0.0046, 16: 0.0057}
    state, chosen = FakeState(rows=1), []
    for step in range(300):
        L = policy(state)
        chosen.append(L)
        _step(policy, state, torch.tensor([1 if step < 60 else {1: 1, 4: 1, 16: 4}[L]]), seconds[L])
    # (before, the rechecks of 4, which gains nothing anywhere here, kept the scale down: 16 never ran)
    assert 16 not in chosen[:12] and chosen[-100:].count(16) > 80


@pytest.mark.parametrize("seconds, best", [({1: 0.0065, 4: 0.0080, 8: 0.0081, 16: 0.0082}, 16),
                                           ({1: 0.0050, 4: 0.0075, 8: 0.0130, 16: 0.0210}, 1)], ids=["gpu", "cpu"])
def test_at_a_batch_auto_judges_wider_widths_by_what_a_wide_step_costs_not_by_the_line_from_plain_ar(seconds, best):
    # emoji-image at 8 rows by its prior (1.21, 1.42, 1.57 tokens per step at 4, 8, 16). On a GPU a wide step costs
    # 1.23x AR at 4 and about the same at 16: the climb from AR is the drafter's and verifier's fixed cost, 16 wins
    # by 1.24x. The line through AR and 4 put 8 at 9.7 ms (it could not win) and the policy stayed at AR. On a CPU
    # a step costs 1.5x AR at 4, 2.6x at 8 and 4.2x at 16: even at the cost of 4, 8 could not win, and AR runs.
    tokens = {1: 1.0, 4: 1.21, 8: 1.42, 16: 1.57}
    total = dict.fromkeys(tokens, 0.0)

    def k_of(L):  # whole tokens per step, averaging the prior's: 1 or 2
        total[L] += tokens[L]
        return int(total[L]) - int(total[L] - tokens[L])

    policy = AutoWindow(max_window=16, memory=WindowMemory(prior={8: tokens}))
    chosen = _run(policy, 300, seconds_of=seconds.get, k_of=k_of, state=FakeState(rows=8))
    assert chosen[-200:].count(best) > 180
    if best == 1:
        assert 8 not in chosen and 16 not in chosen


def test_at_a_batch_a_width_not_timed_that_could_win_where_the_output_now_is_runs_at_once():
    # 8 rows, GPU-like costs (a wide step 1.23-1.26x AR), a prior by band: in the first half of the output no L
    # could win (1.1 tokens per step at 8 and 16), in the second 16 wins by 1.24x. The probes time only 1 and 4; in
    # the second half 8 runs at the first plan made there, then 16, which holds most of it. (Were 8 left for after
    # the best L's next 48 steps, as at a batch a recheck is, 16 would run less than half of it.)
    seconds = {1: 0.0065, 4: 0.0080, 8: 0.0081, 16: 0.0082}
    bands = {1: [1.0, 1.0], 4: [1.05, 1.21], 8: [1.1, 1.42], 16: [1.1, 1.57]}
    policy = AutoWindow(max_window=16, memory=WindowMemory(prior={8: bands}))
    state, total, chosen, easy = FakeState(rows=8), dict.fromkeys(bands, 0.0), [], []
    state.length = 400
    while int(state.n[0]) < 390:
        L = policy(state)
        (easy if int(state.n[0]) >= 200 else chosen).append(L)
        tokens = bands[L][int(state.n[0]) >= 200]
        total[L] += tokens
        _step(policy, state, torch.full((8,), int(total[L]) - int(total[L] - tokens)), seconds[L])
    assert chosen[:8] == [1] * 4 + [4] * 4 and not {8, 16} & set(chosen) and easy.count(16) > 0.8 * len(easy)


def test_with_a_prior_auto_probes_no_width_that_cannot_win_at_the_least_it_can_cost():
    # 16 rows on emoji-image: steps of 8.7, 13.6 and 28 ms at 1, 4 and 16. By the prior, 16 gives 1.41 tokens per
    # step: even at the cost of 4 it would give 104 tokens/s against AR's 115, so it never runs; and 4, 26% behind
    # AR, is not rechecked either
    seconds = {1: 0.0087, 4: 0.0136, 16: 0.028}
    policy = AutoWindow(max_window=16, candidates=POW4, memory=WindowMemory(prior={16: {1: 1.0, 4: 1.165, 16: 1.41}}))
    chosen = _run(policy, 200, seconds_of=seconds.get, k_of=lambda L: 1, state=FakeState(rows=16))
    assert chosen[:8] == [1] * 4 + [4] * 4 and chosen[8:] == [1] * 192


def test_the_costs_probed_are_kept_with_the_memory_for_the_next_call(tmp_path):
    prior = {1: {1: 1.0, 4: 2.0, 16: 8.0}}
    costs = dict(seconds_of=lambda L: 0.001 * L ** 0.5, k_of=lambda L: min(L, 8))
    memory = WindowMemory(tmp_path / "exact.json", prior)
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 14, **costs) == [1] * 4 + [4] * 4 + [16] * 6
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 10, **costs) == [16] * 10  # the next call, same shape
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 4, **costs, state=FakeState(rows=5)) == [1] * 4  # probes
    memory.save()
    again = WindowMemory(tmp_path / "exact.json", prior)  # as a new process makes it
    assert again.shapes == memory.shapes
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=again), 14, **costs, state=FakeState(rows=5))[8:] == [16] * 6


def test_a_prior_is_read_at_the_nearest_batch_size_and_interpolated_in_log_window(tmp_path):
    prior = {1: {1: 1.0, 4: 2.0, 16: 4.0}, 8: {1: 1.0, 4: 1.5, 16: 2.0}}
    assert prior_at(prior, 6, [1, 8, 32]) == {1: (1.0,), 8: (1.75,), 32: (2.0,)}  # held beyond the widest
    assert prior_at(prior, 2, [2]) == {2: (1.5,)}
    by_band = {1: {1: [1.0, 1.0], 4: [1.2, 2.0], 16: [1.4, 4.0]}}  # each band interpolated on its own
    assert prior_at(by_band, 1, [1, 8]) == {1: (1.0, 1.0), 8: (pytest.approx(1.3), 3.0)}
    assert load_prior(tmp_path) == {}  # a model without one: AutoWindow explores


@pytest.mark.parametrize("kind", ["image", "video", "text"])
def test_every_bundled_model_ships_a_prior_for_the_methods_that_use_auto(kind):
    """At every L `auto` may run with the pipeline's widest (its default_window): a pipeline whose widest
    changed without its prior measured again would judge the new candidates by the prior's held figures."""
    from mmspec.pipelines import ImagePipeline, TextPipeline, VideoPipeline
    from mmspec.pipelines.base import models_dir

    pipeline = {"image": ImagePipeline, "video": VideoPipeline, "text": TextPipeline}[kind]
    prior = load_prior(models_dir() / pipeline.default_model)
    methods = ["exact", "coupled", "gumbel", "jacobi", "lookup", "pac"] + (["draft-model", "eagle"] if kind == "text" else [])
    greedy = load_prior(models_dir() / pipeline.default_model, greedy=True)  # text: measured at temperature 0 too
    for method in methods:
        for measured in (prior, greedy) if kind == "text" else (prior,):
            assert 1 in measured[method], method
            assert set(measured[method][1]) == set(AutoWindow(max_window=pipeline.default_window).candidates), method


def test_a_greedy_call_starts_from_the_greedy_prior_and_keeps_its_measurements_apart(tmp_path):
    """Greedy text commits longer runs than sampled text: a greedy call judges candidates by the prior measured at
    temperature 0 (the default one where the model has none), and its steps do not count for sampled calls."""
    (tmp_path / mmspec.window.PRIOR_FILE).write_text(json.dumps({
        "tokens_per_step": {"exact": {"1": {"1": 1.0, "4": 1.1}}, "lookup": {"1": {"1": 1.0, "4": 1.2}}},
        "greedy_tokens_per_step": {"lookup": {"1": {"1": 1.0, "4": 3.5}}}}))
    sampled, greedy = load_prior(tmp_path), load_prior(tmp_path, greedy=True)
    assert greedy == {"lookup": {1: {1: 1.0, 4: 3.5}}} and sampled["lookup"] == {1: {1: 1.0, 4: 1.2}}
    memory = WindowMemory(prior=sampled["lookup"], greedy_prior=greedy["lookup"])
    cold, hot = FakeState(rows=1), FakeState(rows=1)
    cold.sampling, hot.sampling = mmspec.Sampling(temperature=0.0), mmspec.Sampling(temperature=0.8)
    assert memory.prior_for(cold) == {1: {1: 1.0, 4: 3.5}} and memory.prior_for(hot) == {1: {1: 1.0, 4: 1.2}}
    assert WindowMemory(prior=sampled["exact"]).prior_for(cold) == {1: {1: 1.0, 4: 1.1}}
    costs = dict(seconds_of=lambda L: 0.001 * (1 + L / 4), k_of=lambda L: 1)  # 4 costs 2x AR
    # by the greedy prior 4 pays (3.5 tokens for 2x AR's time): once timed, it runs; by the sampled one it never does
    assert _run(AutoWindow(max_window=4, candidates=[1, 4], memory=memory), 12, **costs, state=cold)[-4:] == [4] * 4
    assert 4 not in _run(AutoWindow(max_window=4, candidates=[1, 4], memory=memory), 12, **costs, state=hot)[8:]
    assert len(memory.shapes) == 2  # (1 row, no CFG, greedy) and (1 row, no CFG, sampled)


def test_auto_decides_for_each_batch_shape_on_its_own_measurements():
    """The policy decides on the measurements of the batch shape its steps run (the most rows a step of the decode
    ran, rounded up to a power of two), and picks up a shape's where it left them: wide windows win at one row here
    (a step costs the same at any L) and lose at 16 (a step costs L times more), and each phase after the first of
    its shape runs its best L from its first steps. Rows that finish do not shrink the shape within a decode."""
    policy, state = AutoWindow(max_window=16, candidates=POW4), FakeState(rows=16)
    chosen = {}
    for phase, running in enumerate([1, 16, 1, 16, 9]):
        policy.start(None, state)  # (a new decode)
        state.running, chosen[phase] = running, []
        for _ in range(60):
            L = policy(state)
            chosen[phase].append(L)
            seconds = 0.01 if running == 1 else 0.01 * L
            _step(policy, state, torch.full((16,), min(L, 12)), seconds)
    assert policy.rows == 16 and set(policy.tracks) == {(1, 1)}  # (rows, a group's rows): the batch one group
    assert policy.tracks[1, 1][AutoWindow.TRACK.index("config")].margin == AutoConfig().margin
    assert policy.config.margin == AutoConfig().batch_margin  # (16 rows: a batch's margins)
    assert chosen[2][:10] == [16] * 10 and chosen[3][:10] == [1] * 10 and chosen[4][:10] == [1] * 10
    assert chosen[0][:4] == chosen[1][:4] == [1] * 4  # the first phase of each shape explores from plain AR
    state.running = 1  # rows finish: still 16 rows' decisions
    assert policy(state) == 1 and policy.rows == 16


@pytest.mark.parametrize("layout", [mmspec.Grid2D(4, 4), mmspec.Sequence1D(14)], ids=repr)
@pytest.mark.parametrize("prior", [None, {1: {1: 1.0, 4: 3.0, 8: 6.0}}], ids=["explore", "prior"])
def test_exact_equals_ar_with_auto(layout, prior):
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=layout.axes))
    kw = dict(sampling={"temperature": 0.9, "top_k": 12, "cfg_scale": 2.5}, seed=0, num_samples=2)
    ar = mmspec.generate(target, torch.tensor([0, 3]), layout, method="ar", **kw)
    # with a prior, the first steps probe the candidates' costs: windows of 1, then 4, then what wins
    window = "auto" if prior is None else AutoWindow(max_window=8, memory=WindowMemory(prior=prior))
    auto = mmspec.generate(target, torch.tensor([0, 3]), layout, method="exact", window=window, **kw)
    assert torch.equal(auto.tokens, ar.tokens)
    if prior is not None:
        assert window.estimate.seconds[4]  # 4 was probed


@pytest.mark.parametrize("remembered", [False, True, "prior"], ids=["fresh", "remembered", "prior"])
@pytest.mark.parametrize("method", ["coupled", "lookup"])
def test_auto_matches_the_exact_law(method, remembered):
    target = TabularTarget(3, 4, seed=5)
    sampling = mmspec.Sampling(temperature=1.3, top_p=0.9, cfg_scale=2.0)
    run = lambda policy, n: mmspec.generate(target, torch.tensor([0]), mmspec.Grid2D(2, 2), method=method,  # noqa: E731
                                            window=policy, sampling=sampling, seed=0, num_samples=n)
    memory = WindowMemory(prior={1: {1: 1.0, 4: 2.0}}) if remembered == "prior" else WindowMemory() if remembered \
        else None
    if remembered is True:
        run(AutoWindow(max_window=4, memory=memory), 20_000)  # the measured run starts where this one ended
    g = run(AutoWindow(max_window=4, memory=memory), 20_000)
    assert chi_square_pvalue(sequence_id(g.tokens, 3), tabular_law(target, 0, sampling)) > 1e-3


def test_auto_with_a_memory_starts_the_next_generation_at_the_best_known_window():
    memory = WindowMemory()
    costs = dict(seconds_of=lambda L: 0.01 * (1 + L / 16), k_of=lambda L: min(L, 3))  # 4 pays best
    first = _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 40, **costs)
    assert first[:4] == [1] * 4  # nothing known yet: explore from plain AR
    second = _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 24, **costs)
    assert second == [4] * 24  # starts where the first one ended
    other = AutoWindow(max_window=16, candidates=POW4, memory=memory)
    state = FakeState(rows=5)  # another batch size: its costs are not known
    assert other(state) == 1 and other.explored == 1


def test_auto_with_a_memory_rechecks_a_window_that_kept_losing_less_and_less_often():
    memory = WindowMemory()
    costs = dict(seconds_of=lambda L: 0.01 * L ** 0.5, k_of=lambda L: 1)  # wider never pays: plain AR wins
    rechecks = []
    for _ in range(4):  # four generations of 120 steps, as a render job's batches
        chosen = _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 120, **costs)
        rechecks.append(sum(1 for i in range(1, 120) if chosen[i] == 4 and chosen[i - 1] == 1))
    assert rechecks[0] >= 2 and rechecks[-1] == 0  # the waits carried over: the later batches stay at AR


def test_the_next_call_judges_a_width_probed_early_against_plain_ar_at_the_same_place(tmp_path):
    # 8 rows, a step's cost grows along the output (attention reads a longer prefix: 1.8 ms more per token here) and
    # 4 costs 1.8x AR wherever it runs, for 1 token: it never pays. The first call times 4 in its first rows and AR
    # until its 60th; the next call, which starts where AR was timed last, must not take 4's early cost for its own
    state, chosen = FakeState(rows=8), []
    memory = WindowMemory(tmp_path / "exact.json")

    def run(policy, steps):
        for _ in range(steps):
            L = policy(state)
            chosen.append(L)
            _step(policy, state, torch.ones(8, dtype=torch.long), 0.01 * (1 + int(state.n[0]) / 10) * (1.8 if L > 1 else 1))
    run(AutoWindow(max_window=4, candidates=[1, 4], memory=memory), 60)
    assert chosen.count(4) == 6  # its exploring stretch, in the first rows
    memory.save()
    state.n.zero_()
    chosen.clear()
    run(AutoWindow(max_window=4, candidates=[1, 4], memory=WindowMemory(tmp_path / "exact.json")), 20)
    assert chosen == [1] * 20


def test_a_memory_on_disk_carries_the_measurements_to_the_next_process(tmp_path):
    path = tmp_path / "windows" / "exact.json"
    costs = dict(seconds_of=lambda L: 0.01 * (1 + L / 16), k_of=lambda L: min(L, 3))  # 4 pays best
    memory = WindowMemory(path)
    _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 40, **costs)
    memory.save()
    again = WindowMemory(path)  # as a new process would make it
    assert again.shapes == memory.shapes
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=again), 24, **costs) == [4] * 24


def test_a_memory_file_that_cannot_be_read_is_set_aside_with_a_warning(tmp_path):
    path = tmp_path / "exact.json"
    path.write_text('{"shapes": [[2, true, {"tokens": {}}]]}')  # a field missing
    with pytest.warns(UserWarning, match="measuring afresh"):
        memory = WindowMemory(path)
    assert memory.shapes == {}
    assert _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 4, seconds_of=lambda L: 0.01, k_of=lambda L: 1) == [1] * 4


def test_a_memory_that_cannot_be_written_warns_and_the_generation_goes_on(tmp_path):
    (tmp_path / "file").write_text("")
    memory = WindowMemory(tmp_path / "file" / "exact.json")  # its folder is a file
    _run(AutoWindow(max_window=16, candidates=POW4, memory=memory), 8, seconds_of=lambda L: 0.01, k_of=lambda L: 1)
    with pytest.warns(UserWarning, match="could not keep the window measurements"):
        memory.save()


def test_acceptance_window_grows_with_long_runs_and_shrinks_with_short_ones():
    policy = AcceptanceWindow(max_window=128, min_window=4, headroom=8)
    assert policy(None) == 128  # nothing measured: room for Jacobi drafts to show what they can do
    for _ in range(20):
        policy.observe(None, torch.tensor([12, 0, 14]), 0.0)  # long runs (a done row's 0 does not count)
    assert policy(None) == 128
    for _ in range(20):
        policy.observe(None, torch.tensor([2, 1]), 0.0)
    assert policy(None) == 16  # 8 x 1.5 tokens per step -> 12 -> the next power of two
    for _ in range(30):
        policy.observe(None, torch.tensor([1, 1]), 0.0)
    assert policy(None) == 8
    with pytest.raises(ValueError, match="min_window <= max_window"):
        AcceptanceWindow(max_window=4, min_window=8)


def test_acceptance_window_is_lossless_and_exact_stays_ar():
    target = TabularTarget(3, 4, seed=5)
    sampling = mmspec.Sampling(temperature=1.3, top_p=0.9, cfg_scale=2.0)
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Grid2D(2, 2), method="coupled", sampling=sampling,
                        window=AcceptanceWindow(max_window=4, min_window=1, headroom=1), seed=0, num_samples=20_000)
    assert chi_square_pvalue(sequence_id(g.tokens, 3), tabular_law(target, 0, sampling)) > 1e-3
    assert len(set(g.stats.forwards_at.sum(0).tolist())) > 1  # the window did change
    model = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2))
    kw = dict(sampling={"temperature": 0.9, "top_k": 12, "cfg_scale": 2.5}, seed=0, num_samples=2)
    ar = mmspec.generate(model, torch.tensor([0, 3]), mmspec.Grid2D(4, 4), method="ar", **kw)
    got = mmspec.generate(model, torch.tensor([0, 3]), mmspec.Grid2D(4, 4), method="exact",
                          window=AcceptanceWindow(max_window=8, min_window=2, headroom=2), **kw)
    assert torch.equal(got.tokens, ar.tokens)
