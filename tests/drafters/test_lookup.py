"""A lookup's drafts where a draft head agrees, the head's elsewhere (LookupOrDrafter, eagle's default on text): the
exact law (tests/drafters/test_eagle.py runs it for every eagle variant), wrong variants the law test catches, and
how a spec resolves."""
import dataclasses

import pytest
import torch

import mmspec
from mmspec.drafters import LookupDrafter, make_fill
from mmspec.drafters.eagle import EagleDrafter
from mmspec.drafters.lookup import LookupOrDrafter
from mmspec.verify import RejectionVerifier
from test_distribution import ALPHA
from drafters.test_eagle import _sample, eagle_case
from tiny import chi_square_pvalue, sequence_id


class Counting(LookupOrDrafter):
    """Records, for every step that drafted, the rows whose first draft was the lookup's and the others, and how many
    head forwards its propose ran to draft (not counting the one that writes the pairs of windows of 1 first)."""

    def start(self, state, context):
        super().start(state, context)
        self.rows, self.forwards, self.calls = {"lookup": 0, "head": 0}, {"lookup": [], "head": []}, 0
        forward = self.other.session.forward

        def counted(*args, **kwargs):
            self.calls += 1
            return forward(*args, **kwargs)

        self.other.session.forward = counted

    def propose(self, state, window):
        before, waited = self.calls, self.other.pending.first is not None
        draft = self.choose(state, window)
        caught_up = waited and self.other.pending.first is None
        if draft.slots > 0:
            lookup = draft.onehot[:, 0] & state.active
            self.rows["lookup"] += int(lookup.sum())
            self.rows["head"] += int((~lookup & state.active).sum())
            self.forwards["lookup" if bool(lookup.all()) else "head"].append(self.calls - before - caught_up)
        return draft

    def choose(self, state, window):
        return super().propose(state, window)


class PeeksAtTheDraw(Counting):
    """Wrong: the head drafts first, and the lookup's drafts replace its chain in a step where the head's own draw at
    slot 0 came out as the lookup's first token: the choice reads the step's randomness, so the lookup's copy is
    offered as one-hot exactly when the head drew it."""

    def choose(self, state, window):
        head = self.other.propose(state, window)
        lookup = self.lookup.propose(state, window)
        if head.slots == 0 or lookup.slots == 0:
            return head
        take = (head.tokens[:, 0] == lookup.tokens[:, 0])[:, None] & (torch.arange(head.slots) < lookup.slots)
        padded = torch.cat([lookup.tokens, head.tokens[:, lookup.slots:]], 1)
        return mmspec.steps.Draft(torch.where(take, padded, head.tokens), head.q, head.onehot | take)


class ReportsTheHeadsQ(Counting):
    """Wrong: the lookup's first draft is reported as drawn from the head's q at n (the head agrees with it, after
    all), not as the one-hot copy it is."""

    def choose(self, state, window):
        draft = super().choose(state, window)
        logq = self.other.next_logq(state)
        if draft.slots == 0 or logq is None:
            return draft
        q = draft.q if draft.q is not None else torch.zeros(*draft.tokens.shape, logq.shape[-1])
        q = q.clone()
        q[:, 0] = torch.where(draft.onehot[:, :1], logq.exp(), q[:, 0])
        return mmspec.steps.Draft(draft.tokens, q, draft.onehot & (torch.arange(draft.slots) > 0))


class NoView:
    """A judge that never objects: the lookup drafts every row it matched in (on the tiny cases the random head
    seldom agrees with a copy, and the law tests below want many rows of both kinds)."""

    def next_logq(self, state):
        return None


def _method(drafter: type, head, judge=None):
    def make(layout):
        chain = EagleDrafter(head, "sample")
        made.append(drafter(LookupDrafter(make_fill(layout.default_lookup)), chain, judge or chain))
        return made[-1]

    made = []
    return mmspec.Method("eagle-lookup", make, RejectionVerifier()), made


@pytest.mark.parametrize("name", ["text-1d", "grid-cfg"])
@pytest.mark.parametrize("wrong", [PeeksAtTheDraw, ReportsTheHeadsQ], ids=["peeks-at-the-draw", "reports-heads-q"])
def test_the_law_test_has_power_against_a_wrong_lookup_choice(name, wrong):
    """On text the lookup drafts wherever it matched (NoView), on the grid (row-above copies, which always "match")
    where the head agrees."""
    head, law = eagle_case(name)[1], eagle_case(name)[4]
    for drafter, passes in ((Counting, True), (wrong, False)):
        method, made = _method(drafter, head, NoView() if name == "text-1d" else None)
        pvalue = chi_square_pvalue(sequence_id(_sample(name, method).tokens, 4), law)
        assert (pvalue > ALPHA) == passes, f"{drafter.__name__} on {name}: chi-square p = {pvalue:.2e}"
        if passes:  # the right one drafted rows of both kinds (text: a match in 5 tokens is rare, 6% of the rows)
            assert min(made[0].rows.values()) > 0.05 * sum(made[0].rows.values()), made[0].rows


def test_a_lookup_step_runs_no_head_forward():
    """What the lookup saves is the head's chain: its step runs no head forward before the target's (the update
    after it writes the committed tokens to the head's cache, as after any step), a head step L-2 of them."""
    target, head, layout, sampling, _ = eagle_case("text-1d")
    method, made = _method(Counting, head, NoView())
    for seed in range(20):
        mmspec.generate(target, torch.tensor([0]), layout, method=method, window=4, sampling=sampling, seed=seed)
    lookup = [f for drafter in made for f in drafter.forwards["lookup"]]
    head = [f for drafter in made for f in drafter.forwards["head"]]
    assert lookup and head
    assert set(lookup) == {0} and set(head) == {2}


def test_eagle_takes_the_lookup_on_text_only_unless_told_and_refuses_it_where_it_cannot_draft():
    head = eagle_case("text-1d")[1]
    text, grid = mmspec.Sequence1D(5), mmspec.Grid2D(2, 2)

    def drafter(layout, **options):
        return mmspec.methods.resolve_method({"name": "eagle", "head": head, **options}).make_drafter(layout)

    assert isinstance(drafter(text), LookupOrDrafter) and isinstance(drafter(text, tree=4), LookupOrDrafter)
    assert isinstance(drafter(grid), EagleDrafter) and isinstance(drafter(text, lookup=False), EagleDrafter)
    assert isinstance(drafter(grid, lookup=True), LookupOrDrafter)
    assert not isinstance(drafter(text, proactive=[2, 2]), LookupOrDrafter)
    assert not isinstance(drafter(text, jacobi=1), LookupOrDrafter)
    for other in ({"proactive": [3, 2]}, {"jacobi": 1}):
        with pytest.raises(ValueError, match="lookup drafts whole windows"):
            mmspec.methods.resolve_method({"name": "eagle", "head": head, "lookup": True, **other})
    with pytest.raises(ValueError, match="lookup must be true, false or None"):
        mmspec.methods.resolve_method({"name": "eagle", "head": head, "lookup": "yes"})
