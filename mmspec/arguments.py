"""One-line refusals that name the argument, for the arguments mmspec.generate and the pipelines share, before any
work: a wrong type said `'int' object is not callable` or `'str' object cannot be interpreted as an integer` from
deep inside the call (method, window, sampling and batch_size are checked where they are read)."""
from __future__ import annotations

import operator


def check_arguments(*, num_outputs=1, on_commit=None, compile=False, progress_bar=False) -> None:
    if isinstance(num_outputs, bool) or not isinstance(num_outputs, int) or num_outputs < 1:
        raise ValueError(f"num_outputs must be an int >= 1, got {num_outputs!r}")
    if on_commit is not None and not callable(on_commit):
        raise TypeError(f"on_commit must be a function on_commit(state, k) or None, got {on_commit!r}")
    if compile is not None and not isinstance(compile, (bool, dict)):
        raise TypeError(f"compile must be True, False or a dict of torch.compile's options, got {compile!r}")
    if not isinstance(progress_bar, bool):
        raise TypeError(f"progress_bar must be True or False, got {progress_bar!r}")


def seed_list(seed) -> "list[int] | None":
    """A seed argument that is a list of ints -> the list; an int -> None; anything else refused naming `seed`."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return None
    try:
        if isinstance(seed, (str, bytes, bool)):
            raise TypeError
        return [operator.index(s) for s in seed]
    except TypeError:
        raise TypeError(f"seed must be an int or a list of ints (one per output), got {seed!r}") from None
