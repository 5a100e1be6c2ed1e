"""The numbers of a run and of a comparison with plain AR, as the app shows them."""
from __future__ import annotations

from mmspec.pipelines.prompts import shorten


def run_stats(out, method: str) -> dict:
    """A pipeline output's summary (NFE, acceptance, the window that ran, time and throughput) with its prompt and
    method; rows are called outputs here, as in the tab's controls."""
    summary = dict(out.summary)
    return {"prompt": shorten(out.prompts[0], 200), "method": method, "outputs": summary.pop("rows"), **summary}


def comparison(method: str, fast, ar, identical: "bool | None") -> dict:
    """`fast` ran `method`, `ar` plain AR on the same prompt, seed and sampling; identical: whether
    their tokens are equal (checked for exact only, else None)."""
    return {"method": method, "seconds": fast.summary["seconds"], "nfe": fast.summary["nfe"],
            "ar_seconds": ar.summary["seconds"], "ar_nfe": ar.summary["nfe"],
            "speedup": round(ar.summary["seconds"] / max(fast.summary["seconds"], 1e-9), 2),
            "nfe_ratio": round(ar.summary["nfe"] / max(fast.summary["nfe"], 1), 2),
            "tokens_identical": identical}


def verdict(r: dict) -> str:
    """A comparison in one Markdown paragraph."""
    line = (f"**{r['method']}**: {r['seconds']:.2f} s, {r['nfe']} forwards · **ar**: {r['ar_seconds']:.2f} s, "
            f"{r['ar_nfe']} forwards · measured speed-up **{r['speedup']:.2f}x** "
            f"({r['nfe_ratio']:.2f}x fewer forwards)")
    if r["tokens_identical"] is None:
        return line + ("\n\nThe outputs differ from AR's by design: the method samples AR's distribution, not its "
                       "tokens. Choose `exact` for AR's very tokens.")
    same = "identical to AR's, token for token" if r["tokens_identical"] else "NOT identical to AR's"
    return line + f"\n\n**Tokens {same}.**"
