"""Rows that are done leave the forwards (mmspec.adapters.rows: the loop's Rows, sessions narrowed to them) and change
nothing else."""
import pytest
import torch

import mmspec
import mmspec.adapters.rows
from mmspec.adapters.rows import ActiveRows, Rows
from tiny import CycleWindow, tiny_gpt, tiny_head

SAMPLING = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
METHODS = ["ar", "coupled", "exact", "lookup", "draft-model", "pac", {"name": "exact", "proactive": [3, 2]},
           {"name": "eagle"}, {"name": "eagle", "tree": [6, 3]}, {"name": "eagle", "exact": True, "jacobi": 2},
           {"name": "eagle", "lookup": True}]


def _target(seed=0):
    return mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2, seed=seed))


def _method(method):
    if method == "draft-model":
        return {"name": "draft-model", "model": _target(seed=3)}
    if isinstance(method, dict) and method["name"] == "eagle":
        return {**method, "head": tiny_head(16, 24, rope_axes=2, seed=3, dtype=torch.float64)}
    return method


def _run(method, sampling=SAMPLING, window=5):
    return mmspec.generate(_target(), torch.tensor([0, 3, 1]), mmspec.Grid2D(4, 5), method=_method(method),
                           num_samples=2, sampling=sampling, window=window, seed=[4, 9, 1, 7, 2, 5])


def _forward_rows(monkeypatch) -> list[int]:
    """The batch rows of every forward the target's session runs (CFG doubles them inside)."""
    rows, forward, run = [], ActiveRows.forward, ActiveRows.forward_run

    def counted(self, tokens, start, tree=None):
        if self.rows is None:  # (else its forward_run counts)
            rows.append(self.batch_size)
        return forward(self, tokens, start, tree)

    def counted_run(self, tokens, start, tree=None):
        rows.append(len(self.rows))
        return run(self, tokens, start, tree)

    monkeypatch.setattr(ActiveRows, "forward", counted)
    monkeypatch.setattr(ActiveRows, "forward_run", counted_run)
    return rows


def _same(a, b):
    assert torch.equal(a.tokens, b.tokens)
    for field in ("nfe", "committed", "drafted", "accepted", "accepted_at", "commit_step"):
        assert torch.equal(getattr(a.stats, field), getattr(b.stats, field)), field


@pytest.mark.parametrize("cfg", [2.5, 1.0])
@pytest.mark.parametrize("method", METHODS, ids=str)
def test_rows_that_are_done_leave_the_forwards_and_nothing_else_changes(method, cfg, monkeypatch):
    sampling = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=cfg)
    rows = _forward_rows(monkeypatch)
    got = _run(method, sampling, window=CycleWindow((5, 2, 7)))
    ran = list(rows)
    monkeypatch.setattr(Rows, "follow", lambda self, active, running: None)  # every row to the end, as before
    _same(got, _run(method, sampling, window=CycleWindow((5, 2, 7))))
    if method != "ar":  # (AR's rows finish together)
        assert ran[0] == 6 and min(ran) < 6, "no row left the batch"
        assert ran == sorted(ran, reverse=True)  # rows only ever leave


def test_exact_equals_ar_as_rows_leave():
    exact = _run("exact", window=CycleWindow((9, 3, 6)))
    assert torch.equal(exact.tokens, _run("ar").tokens)
    assert len(set(exact.stats.nfe.tolist())) > 2  # rows finished at several steps


class RowsRolled(ActiveRows):
    """Wrong: the rows run keep their caches but are handed each other's tokens (one place off)."""

    def forward_run(self, tokens, start, tree=None):
        order = torch.arange(len(tokens), device=tokens.device)
        order[self.rows] = self.rows.roll(1)
        return super().forward_run(tokens[order], start[order], tree)


def test_the_comparison_catches_rows_mixed_up(monkeypatch):
    good = _run("coupled")
    monkeypatch.setattr(mmspec.adapters.rows, "ActiveRows", RowsRolled)
    assert not torch.equal(_run("coupled").tokens, good.tokens)


def test_on_a_cpu_rows_leave_a_compiled_generation_too():
    """torch.compile's graphs are made per shape, so on an accelerator a compiled step runs the whole batch to the end;
    on a CPU the rows that are done cost more than the compiled step saves: they leave, and the steps after run
    eager (tests/test_compile.py)."""
    target = _target()
    seen = []
    session = target.session

    def opened(*args, **kwargs):
        seen.append(session(*args, **kwargs))
        return seen[-1]

    target.session = opened
    plain = _run("exact")
    g = mmspec.generate(target, torch.tensor([0, 3, 1]), mmspec.Grid2D(4, 5), method="exact", num_samples=2,
                        sampling=SAMPLING, window=5, seed=[4, 9, 1, 7, 2, 5], compile={"backend": "eager"})
    assert torch.equal(g.tokens, plain.tokens)
    assert seen[-1].batch_size < 6 and seen[-1].cache.k[0].shape[0] == 2 * seen[-1].batch_size


def test_select_keeps_the_rows_asked_for_with_their_null_rows():
    target = _target()
    session = target.session(torch.tensor([0, 3, 1]), mmspec.Grid2D(4, 5), cfg=True, num_samples=1, max_window=4)
    k = [kv.clone() for kv in session.cache.k]
    session.select(torch.tensor([0, 2]))
    assert session.batch_size == 2 and session.cache.k[0].shape[0] == 4
    assert all(torch.equal(new, old[[0, 2, 3, 5]]) for new, old in zip(session.cache.k, k))
    assert session.cache.layers[0][0].data_ptr() == session.cache.k[0].data_ptr()  # the per-layer views follow
    assert session.cache.rows[1][0].data_ptr() == session.cache.v[0].data_ptr()


@pytest.mark.parametrize("method", ["ar", "coupled", "lookup", "eagle"])
def test_text_rows_that_stop_early_leave_too(method, monkeypatch):
    """Left-padded prompts of different lengths, rows ended by a stop token (plain AR's rows finish apart too)."""
    from tiny import tiny_llama

    model = tiny_llama()
    m = {"name": "eagle", "head": tiny_head(40, 32, seed=5, dtype=torch.float64)} if method == "eagle" else method

    def run():
        return mmspec.generate(mmspec.HFCausalLM(model), [[1, 5, 7, 9, 5, 7], [1, 3], [1, 8, 8, 2, 30], [1, 4]],
                               mmspec.Sequence1D(24), method=m, window=4, sampling={"temperature": 1.0},
                               stop_tokens=[2, 11], seed=1)

    rows = _forward_rows(monkeypatch)
    got = run()
    assert len(set(got.lengths.tolist())) > 2 and min(rows) < 4  # rows stopped apart and left
    monkeypatch.setattr(Rows, "follow", lambda self, active, running: None)
    _same(got, run())


def test_a_draft_models_rows_leave_its_forwards_too(monkeypatch):
    rows = []
    forward = mmspec.adapters.base.PrefixSession.forward

    def counted(self, tokens, start, tree=None):
        rows.append((id(self), tokens.shape[0]))
        return forward(self, tokens, start, tree)

    monkeypatch.setattr(mmspec.adapters.base.PrefixSession, "forward", counted)
    _run("draft-model", window=4)
    sessions = {s for s, _ in rows}
    assert len(sessions) == 2  # the target's and the draft model's
    for s in sessions:
        mine = [r for t, r in rows if t == s]
        assert mine[0] == 6 and min(mine) < 6 and mine == sorted(mine, reverse=True)


@pytest.mark.parametrize("method", [{"name": "eagle"}, {"name": "eagle", "tree": [6, 3]}], ids=str)
def test_a_draft_heads_rows_leave_its_forwards_too(method, monkeypatch):
    from mmspec.drafters.eagle import HeadSession

    rows, forward = [], HeadSession.forward

    def counted(self, hidden, tokens, start, columns=None, tree=None):
        run = self.running.run(self.copies)
        rows.append(tokens.shape[0] if run is None else len(run))
        return forward(self, hidden, tokens, start, columns, tree)

    monkeypatch.setattr(HeadSession, "forward", counted)
    got = _run(method, window=4)
    assert rows[0] == 12 and min(rows) < 12 and rows == sorted(rows, reverse=True)  # 6 rows and their null rows
    monkeypatch.setattr(Rows, "follow", lambda self, active, running: None)  # no row leaves any forward
    _same(got, _run(method, window=4))
