import pytest
import torch

import mmspec
from mmspec.sampling import _top_p_by_bands, sample_from
from tiny import reference_p

SETTINGS = [
    mmspec.Sampling(),
    mmspec.Sampling(temperature=0.7, top_k=5),
    mmspec.Sampling(temperature=1.3, top_p=0.8),
    mmspec.Sampling(top_k=6, top_p=0.7, cfg_scale=4.0),
    mmspec.Sampling(temperature=0.5, cfg_scale=3.0, cfg_mode="log_softmax", top_k=3),
]


@pytest.mark.parametrize("s", SETTINGS, ids=str)
def test_logp_matches_an_independent_statement_of_the_rule(s):
    g = torch.Generator().manual_seed(0)
    c, u = torch.randn(2, 4, 11, generator=g, dtype=torch.float64) * 2
    logp = s.logp(c, u)
    assert logp.dtype == torch.float32
    for row in range(4):
        torch.testing.assert_close(logp[row].exp().double(), reference_p(c[row], u[row], s), atol=1e-6, rtol=0)


def test_cfg_modes_differ_and_raw_logit_rule_is_u_plus_s_c_minus_u():
    c, u = torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    raw = mmspec.Sampling(cfg_scale=2.0).logp(c, u)
    torch.testing.assert_close(raw, (u + 2 * (c - u)).log_softmax(-1))
    lsm = mmspec.Sampling(cfg_scale=2.0, cfg_mode="log_softmax").logp(c, u)
    lc, lu = c.log_softmax(-1), u.log_softmax(-1)
    torch.testing.assert_close(lsm, (lu + 2 * (lc - lu)).log_softmax(-1))


def test_greedy_is_one_hot_on_the_first_argmax():
    p = mmspec.Sampling(temperature=0).logp(torch.tensor([[0.0, 3.0, 3.0, 1.0]])).exp()
    assert p.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_sample_from_follows_the_weights_and_never_picks_zero_mass():
    w = torch.tensor([0.0, 1.0, 0.0, 3.0, 0.0])
    u = torch.rand(100_000, generator=torch.Generator().manual_seed(1))
    draws = sample_from(w.expand(len(u), -1), u)
    freq = torch.bincount(draws, minlength=5).double() / len(u)
    assert freq[[0, 2, 4]].sum() == 0
    assert abs(freq[3] - 0.75) < 0.01
    assert sample_from(w, torch.tensor(1 - 2**-24)).item() == 3  # rounding at the top stays on mass


@pytest.mark.parametrize("top_p", [0.5, 0.95, 0.999])
def test_top_p_on_a_large_vocabulary_ranks_few_or_all_tokens_with_one_rule(top_p):
    g = torch.Generator().manual_seed(2)
    peaked = torch.randn(3, 4096, generator=g) * 4      # the top 256 hold top_p: the short path
    flat = torch.randn(3, 4096, generator=g) * 0.1      # they do not: every row sorts in full
    for z in (peaked, flat, torch.cat([peaked, flat])):
        logp = mmspec.Sampling(top_p=top_p).logp(z)
        assert _as_the_sort_keeps(torch.isfinite(logp).sum(-1), z, top_p)
        assert torch.equal(logp.argmax(-1), z.argmax(-1))
        torch.testing.assert_close(logp.exp().sum(-1), torch.ones(len(z)))
    # a row's result does not depend on whether another row in the batch forced the full sort
    mixed = mmspec.Sampling(top_p=top_p).logp(torch.cat([peaked, flat]))
    assert torch.equal(mixed[:3], mmspec.Sampling(top_p=top_p).logp(peaked))


def _as_the_sort_keeps(count: torch.Tensor, z: torch.Tensor, top_p: float, rounding: float = 1e-5) -> bool:
    """Whether each row keeps as many tokens as the top-p rule by a full sort. Its mass is summed in another order,
    so where the mass before a token is within float rounding of top_p (a 4096-token sum, on this CPU or another)
    either count is the rule's: the token there may go either way, no other."""
    ranked, _ = z.softmax(-1).sort(-1, descending=True)
    before = ranked.cumsum(-1) - ranked
    least, most = ((before < t).sum(-1) for t in (top_p - rounding, top_p + rounding))
    return bool(((least <= count) & (count <= most)).all())


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_top_p_keeps_the_sorts_count_with_ties_and_tokens_ruled_out(top_p):
    """The long path ranks only the band of log p where the mass reaches top_p: with logits that tie (rounded) and a
    third ruled out (-inf, as top-k leaves them), it keeps what a full sort keeps, and the most likely."""
    g = torch.Generator().manual_seed(5)
    z = (torch.randn(6, 4096, generator=g) * torch.tensor([0.05, 0.5, 1.0, 2.0, 3.0, 6.0])[:, None]).round(decimals=1)
    z[:, ::3] = -torch.inf
    stays = torch.isfinite(mmspec.Sampling(top_p=top_p).logp(z))
    assert _as_the_sort_keeps(stays.sum(-1), z, top_p)
    assert (torch.where(stays, z, torch.inf).amin(-1) >= torch.where(stays, -torch.inf, z).amax(-1)).all()


def test_top_p_by_bands_where_the_mass_reaches_top_p_in_the_deepest_band():
    """The deepest band holds every token below `depth`: where the nucleus ends there, it is ranked like any other."""
    g = torch.Generator().manual_seed(6)
    z = torch.randn(8, 4096, generator=g) * torch.linspace(0.5, 3.0, 8)[:, None]
    lse = z.logsumexp(-1, keepdim=True)
    deep = _top_p_by_bands(z, lse, 0.9, bands=8, depth=2.0)
    assert ((z.amax(-1, keepdim=True) - z)[torch.isfinite(deep)].max() > 2.0)
    assert _as_the_sort_keeps(torch.isfinite(deep).sum(-1), z, 0.9)
    assert torch.equal(deep, _top_p_by_bands(z, lse, 0.9))  # the bands change the work, not the result
