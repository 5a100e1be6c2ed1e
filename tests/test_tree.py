"""Tree windows: one forward over a chain and its proactive branches, or over a token tree that differs from row to
row, equals plain forwards of each path, and adopting a path leaves the cache as if it had been fed as a chain."""
import pytest
import torch

import mmspec
from mmspec import HFCausalLM
from mmspec.tree import best_nodes, forest, proactive_tree, token_tree
from tiny import tiny_gpt, tiny_llama


def test_the_tree_shape():
    tree = proactive_tree(4, 2, 2, "cpu")
    assert tree.offset.tolist() == [0, 1, 2, 3, 1, 2, 1, 2]
    v = tree.visible.long().tolist()
    assert v[3] == [1, 1, 1, 1, 0, 0, 0, 0]  # the chain is causal
    assert v[5] == [1, 0, 0, 0, 1, 1, 0, 0]  # a child sees the last committed token and its own branch
    assert v[6] == [1, 0, 0, 0, 0, 0, 1, 0]
    assert tree.path(torch.tensor([0, 1, 2])).tolist() == [[1, 2], [4, 5], [6, 7]]
    with pytest.raises(ValueError, match="at least 4 positions"):
        proactive_tree(3, 1, 3, "cpu")


def _targets():
    yield "gpt", mmspec.ReferenceTarget(tiny_gpt(rope_axes=1, dtype=torch.float64)), torch.tensor([1, 2]), True
    yield "llama", HFCausalLM(tiny_llama()), [[1, 5, 7], [1, 3, 9, 9, 2]], False


@pytest.mark.parametrize("name,target,cond,cfg", list(_targets()), ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("static", [False, True])
def test_a_tree_forward_equals_a_forward_of_each_path(name, target, cond, cfg, static):
    layout, g = mmspec.Sequence1D(12), torch.Generator().manual_seed(0)
    tree = proactive_tree(4, 2, 2, "cpu")
    tok = lambda *s: torch.randint(0, 16, s, generator=g)  # noqa: E731
    prefix, chain, branches = tok(2, 3), tok(2, 4), tok(2, 2, 2)

    def session():
        s = target.session(cond, layout, cfg=cfg, max_window=8)
        s.cache.static = static
        s.forward(prefix, torch.full((2,), -1))  # index -1 .. 1 committed
        return s

    start = torch.full((2,), 2)
    a = session()
    cond_a, null_a = a.forward(torch.cat([chain, branches.flatten(1)], 1), start, tree)
    for i in range(2):  # branch i as a plain chain [last committed, sibling, child]
        b = session()
        cond_b, null_b = b.forward(torch.cat([chain[:, :1], branches[:, i]], 1), start)
        torch.testing.assert_close(cond_a[:, 4 + 2 * i: 6 + 2 * i], cond_b[:, 1:])
        torch.testing.assert_close(cond_a[:, 0], cond_b[:, 0])
        if cfg:
            torch.testing.assert_close(null_a[:, 4 + 2 * i: 6 + 2 * i], null_b[:, 1:])
    plain = session().forward(chain, start)[0]
    torch.testing.assert_close(cond_a[:, :4], plain)

    # row 0 takes branch 1, row 1 the chain; then both feed two more tokens after index start + 2
    a.adopt(tree.path(torch.tensor([2, 0])))
    more = tok(2, 2)
    got = a.forward(more, start + 2)[0]
    path = torch.stack([torch.cat([chain[0, :1], branches[0, 1]]), chain[1, :3]])
    c = session()
    c.forward(path, start)
    torch.testing.assert_close(got, c.forward(more, start + 2)[0])


def test_a_forest_forward_equals_a_forward_of_each_branch():
    target, g = mmspec.ReferenceTarget(tiny_gpt(rope_axes=1, dtype=torch.float64)), torch.Generator().manual_seed(1)
    layout, cond = mmspec.Sequence1D(12), torch.tensor([1, 2])
    prefix, branches = torch.randint(0, 16, (2, 3), generator=g), torch.randint(0, 16, (2, 3, 2), generator=g)
    tree = forest(3, 2, "cpu")
    assert tree.offset.tolist() == [0, 1, 0, 1, 0, 1] and tree.visible.long().tolist()[3] == [0, 0, 1, 1, 0, 0]

    def session():
        s = target.session(cond, layout, cfg=True, max_window=8)
        s.forward(prefix, torch.full((2,), -1))  # indices -1 .. 1 committed
        return s

    start = torch.full((2,), 2)
    got = session().forward(branches.flatten(1), start, tree)
    for i in range(3):
        want = session().forward(branches[:, i], start)
        for a, b in zip(got, want):
            torch.testing.assert_close(a[:, 2 * i: 2 * i + 2], b)


# two rows' token trees of 5 nodes (node 0: the last committed token): row 0 branches at the root and at node 1,
# row 1 is a chain of three with a second child of the root that has one of its own
PARENT, DEPTH = torch.tensor([[0, 0, 1, 1, 3], [0, 1, 2, 0, 4]]), torch.tensor([[1, 1, 2, 2, 3], [1, 2, 3, 1, 2]])


def test_the_token_tree_shape():
    tree = token_tree(PARENT, DEPTH, 3)
    assert tree.offset.tolist() == [[0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 1, 2]]
    assert tree.visible[0].long().tolist()[5] == [1, 1, 0, 1, 0, 1]  # node 5: the root, 1, 3 and itself
    assert tree.visible[1].long().tolist()[3] == [1, 1, 1, 1, 0, 0]
    assert tree.visible[1].long().tolist()[5] == [1, 0, 0, 0, 1, 1]
    assert tree.rows(4).visible.shape == (4, 6, 6) and torch.equal(tree.rows(4).visible[2:], tree.visible)


def _path(b: int, w: int) -> list[int]:
    """Nodes from the root's child down to node w in row b."""
    path = [w]
    while PARENT[b, path[-1] - 1] != 0:
        path.append(int(PARENT[b, path[-1] - 1]))
    return path[::-1]


@pytest.mark.parametrize("name,target,cond,cfg", list(_targets()), ids=lambda x: x if isinstance(x, str) else "")
def test_a_token_tree_forward_equals_a_forward_of_each_path(name, target, cond, cfg):
    """Each row's own tree (CFG's null rows included) and, after adopting a path per row, the cache of that path."""
    layout, g = mmspec.Sequence1D(12), torch.Generator().manual_seed(2)
    tree = token_tree(PARENT, DEPTH, 3)
    prefix, root, nodes = (torch.randint(0, 16, s, generator=g) for s in ((2, 3), (2, 1), (2, 5)))

    def session():
        s = target.session(cond, layout, cfg=cfg, max_window=8)
        s.forward(prefix, torch.full((2,), -1))  # index -1 .. 1 committed
        return s

    start = torch.full((2,), 2)
    a = session()
    got = a.forward(torch.cat([root, nodes], 1), start, tree)
    for b in range(2):
        for w in range(1, 6):
            chain = torch.cat([root[b], nodes[b, [v - 1 for v in _path(b, w)]]])[None].expand(2, -1)
            want = session().forward(chain, start)
            for x, y in zip(got, want):
                if x is not None:
                    torch.testing.assert_close(x[b, [0, w]], y[b, [0, -1]])
    a.adopt(torch.tensor([[1, 3, 5], [4, 5, 5]]))  # row 0 takes 1, 3, 5; row 1 takes 4, 5 (then anything)
    more = torch.randint(0, 16, (2, 2), generator=g)
    paths = torch.stack([torch.cat([root[0], nodes[0, [0, 2, 4]]]),
                         torch.cat([root[1], nodes[1, [3, 4]], more[1, :1]])])
    c = session()
    c.forward(paths, start)
    at = torch.tensor([5, 4])  # row 0 goes on after its three path nodes, row 1 after its two
    torch.testing.assert_close(a.forward(more, at)[0], c.forward(more, at)[0])


def test_the_best_nodes_keep_every_parent_and_their_order():
    """Scores tie between a parent and its child (a child sure of its token) and at -inf: the parent is still chosen
    first; the nodes come in candidate order and their parents as node numbers."""
    score = torch.tensor([[-0.1, -2.0, -0.1, -0.5, -torch.inf, -torch.inf, -0.1]])
    parent = torch.tensor([[-1, -1, 0, 0, 1, 4, 2]])  # candidates 0, 1 at depth 1; 2, 3, 4 below; 5, 6 deeper
    chosen, up = best_nodes(score, parent, 4)
    assert chosen.tolist() == [[0, 2, 3, 6]] and up.tolist() == [[0, 1, 1, 2]]
    chosen, up = best_nodes(score, parent, 7)
    assert chosen.tolist() == [list(range(7))] and up.tolist() == [[0, 0, 1, 1, 2, 5, 3]]
