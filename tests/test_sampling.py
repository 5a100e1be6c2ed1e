import pytest
import torch

import mmspec
from mmspec.sampling import sample_from
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
        p = z.softmax(-1)
        ranked, _ = p.sort(-1, descending=True)
        kept = (ranked.cumsum(-1) - ranked < top_p).sum(-1)  # how many the rule keeps per row
        assert torch.equal(torch.isfinite(logp).sum(-1), kept)
        assert torch.equal(logp.argmax(-1), z.argmax(-1))
        torch.testing.assert_close(logp.exp().sum(-1), torch.ones(len(z)))
    # a row's result does not depend on whether another row in the batch forced the full sort
    mixed = mmspec.Sampling(top_p=top_p).logp(torch.cat([peaked, flat]))
    assert torch.equal(mixed[:3], mmspec.Sampling(top_p=top_p).logp(peaked))
