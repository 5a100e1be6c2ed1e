"""The method registry: a spec is parsed once into a Spec, and the CLI's flags come from the registry."""
import pytest
import torch

from mmspec.cli import build_parser
from mmspec.methods import OPTIONS, REGISTRY, Spec, method_names, takers
from tiny import tiny_gpt


def test_a_spec_is_parsed_once_into_a_value_that_round_trips():
    spec = Spec.parse({"name": "coupled", "init": "above", "proactive": (4, 3)})
    assert spec == Spec("coupled", {"init": "above", "proactive": [4, 3]})
    assert Spec.parse(spec) is spec and Spec.parse(spec.value) == spec
    assert Spec.parse({"name": "exact"}).value == "exact"  # a mapping with only a name is the name (jobs hash alike)


@pytest.mark.parametrize("spec, message", [
    ("fast", "unknown method 'fast'"),
    ({"name": "ar", "proactive": [4, 3]}, "bad options ['proactive'] for method 'ar': it takes none"),
    ({"name": "lookup", "init": "above"}, "bad options ['init'] for method 'lookup': it takes fill"),
    ({"name": "jacobi", "init": "diagonal"}, "unknown fill policy 'diagonal'"),
    ({"name": "pac", "proactive": [1, 3]}, "proactive drafting needs width >= 2"),
    ({"name": "eagle", "stop": 1.5}, "stop must be a probability"),
    # options that do not combine: the entry's `combines`, before any head is named or loaded
    ({"name": "eagle", "jacobi": 1, "proactive": [3, 2]}, "a Jacobi window after the head's slots, not both"),
    ({"name": "eagle", "tree": 8, "stop": 0.1}, "no stop with it"),
])
def test_a_bad_spec_is_refused_where_it_is_parsed(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Spec.parse(spec)


def test_a_spec_needs_the_resource_it_does_not_name():
    assert Spec.parse("draft-model").needs == "model" and Spec.parse("eagle").needs == "head"
    assert Spec.parse({"name": "eagle", "head": None}).needs == "head"
    assert Spec.parse("coupled").needs is None
    assert method_names() == [n for n in REGISTRY if n not in ("draft-model", "eagle")]
    assert method_names(has_draft_model=True, has_head=True) == list(REGISTRY)


def test_the_command_line_flags_are_the_registry_options_that_have_one():
    generate = build_parser()._subparsers._group_actions[0].choices["generate"]
    flags = {a.dest: a for a in generate._actions}
    assert sorted(flags["method"].choices) == sorted(REGISTRY)
    flagged = [name for name, option in OPTIONS.items() if option.flag is not None]
    assert "head" in flagged and "model" not in flagged  # a draft model is the pipeline's --draft, not a flag
    for name in flagged:
        assert flags[name].help.startswith(", ".join(takers(name)) + ":")


def test_a_method_whose_verifier_cannot_read_its_drafts_is_refused_before_any_work():
    import dataclasses

    import mmspec
    from mmspec.verify import RejectionVerifier

    branches = mmspec.methods.exact(proactive=(3, 2))
    assert branches.drafter(mmspec.Grid2D(2, 2)).makes == {"chain", "branches"}
    wrong = dataclasses.replace(branches, verifier=RejectionVerifier())  # a chain verifier given branches
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=8, n_layer=1))
    with pytest.raises(ValueError, match=r"makes \['branches'\] drafts, which its verifier RejectionVerifier"):
        mmspec.generate(target, torch.tensor([0]), mmspec.Grid2D(2, 2), method=wrong, window=3)
