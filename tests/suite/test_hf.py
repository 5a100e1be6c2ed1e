import torch

from benchmarks.suite.hf import _until_eos, generation_config


class _Pipe:  # what generation_config reads of a TextPipeline
    class target:
        class model:
            from transformers import GenerationConfig

            generation_config = GenerationConfig(eos_token_id=2, pad_token_id=None)


def test_generation_config_has_exactly_mmspec_sampling():
    sampled = generation_config(_Pipe, "generate", {"temperature": 0.8, "top_p": 0.95}, 7)
    assert sampled.do_sample and sampled.top_k == 0 and sampled.top_p == 0.95 and sampled.temperature == 0.8
    assert sampled.max_new_tokens == 7 and sampled.pad_token_id == 2  # no pad id: EOS pads
    greedy = generation_config(_Pipe, "prompt-lookup", {"temperature": 0.0}, 7)
    assert not greedy.do_sample and greedy.prompt_lookup_num_tokens == 10


def test_new_tokens_end_at_the_first_eos():
    assert _until_eos(torch.tensor([5, 2, 2, 2]), torch.tensor([2])).tolist() == [5, 2]
    assert _until_eos(torch.tensor([5, 6]), torch.tensor([], dtype=torch.long)).tolist() == [5, 6]
