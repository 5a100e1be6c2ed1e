"""The acceptance suite as markdown: NFE ratio and mean acceptance length against the window, acceptance per
window slot, the TV / entropy diagnosis (SCD's), the issue's targets and the published reference points."""
from __future__ import annotations

from benchmarks.suite.cases import HOT
from benchmarks.suite.published import PUBLISHED, TARGETS, TEXT_TARGET_WINDOW
from benchmarks.suite.report import environment_line, sampling_name

GRID_KINDS = ("image", "video")


def count_rows(result: dict, one_row: bool = False, hot: bool = False) -> list[dict]:
    """Every entry's figures from the count cases (batches, or the 1-row runs; at the suite's sampling, or with
    hot at cases.HOT), each with its kind."""
    return [{"kind": c["kind"], **r} for c in _cases(result, one_row, hot) for r in c["results"]]


def at_default(result: dict, one_row: bool = False, hot: bool = False) -> list[dict]:
    """Each method's figures at its kind's default window, or at the widest below it that the method ran at
    (cases.WINDOW_CAPS stops some sweeps short); `ar` left out."""
    default, picked = result["settings"]["default_windows"], {}
    for r in count_rows(result, one_row, hot):
        key = (r["kind"], r["method"])
        if r["name"] != "ar" and r["window"] <= default[r["kind"]] and r["window"] > picked.get(key, {"window": 0})["window"]:
            picked[key] = r
    return list(picked.values())


def slot_groups(D: int) -> list[tuple[str, range]]:
    """Draft slots 0 .. D-1 in groups: one by one up to 3, then doubling ('4-7', '8-15', ...)."""
    groups, start = [], 0
    for end in (1, 2, 3, 4, 8, 16, 32, 64, 128, 256):
        if start >= D:
            break
        stop = min(end, D)
        groups.append((str(start) if stop - start == 1 else f"{start}-{stop - 1}", range(start, stop)))
        start = stop
    return groups


def group_mean(values: list, slots: range, weights: list | None = None) -> float | None:
    """The mean of per-slot values over `slots`, weighted by what each was measured over (None: nothing)."""
    pairs = [(values[i], 1.0 if weights is None else weights[i]) for i in slots if i < len(values)
             and values[i] is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _f(x, fmt: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{suffix}"


def _ratio(r: dict) -> str:
    """The generated-token NFE ratio, with the quick suite's count in brackets where they differ."""
    same = abs(r["nfe_ratio"] - r["generated_nfe_ratio"]) < 0.005
    return f"{r['generated_nfe_ratio']:.2f}x" + ("" if same else f" ({r['nfe_ratio']:.2f}x)")


def markdown(result: dict, suite: str = "acceptance") -> str:
    s = result["settings"]
    sampling = "; ".join(f"{k} {sampling_name(v)}" for k, v in s["default_sampling"].items() if k != "text")
    rows = _batch_rows(result)
    lines = [f"# `python -m benchmarks.suite {suite}`", "", environment_line(result), "",
             (f"Forward counts only: nothing is timed, so a shared CPU does not change these figures. {_protocol(result)} "
              f"Image and video at the models' default sampling ({sampling}); text (max {s['max_new_tokens']} new "
              f"tokens) at {_text_sampling(result)}, draft model {s['draft'] or 'none'}."), "",
             ("**NFE ratio** = `ar` forwards per row / method forwards per row, over the forwards that committed at "
              f"least one generated token.{_given_note(result)} **Mean acceptance length**: generated tokens per such "
              "forward. **Batch ratio**: `ar`'s forwards for the whole batch / the method's (a batch runs until its "
              "slowest row ends)."), ""]
    lines += _pivot(f"NFE ratio against the window ({rows} rows)", count_rows(result), GRID_KINDS, _ratio)
    lines += _pivot(f"Mean acceptance length against the window ({rows} rows)", count_rows(result),
                    GRID_KINDS + ("text",), lambda r: f"{r['generated_mean_acceptance_length']:.2f}")
    lines += _batch_and_single(result, rows)
    lines += _per_slot(result, rows)
    lines += _diagnosis(result, rows)
    lines += _targets(result, rows)
    lines += _hot(result)
    lines += _published()
    return "\n".join(lines) + "\n"


def _cases(result: dict, one_row: bool, hot: bool = False) -> list[dict]:
    """The count cases of one kind of run: batch or 1-row, at the suite's sampling or (hot) at cases.HOT."""
    return [c for c in result["cases"] if c["case"] == "CountCase" and c["one_row"] == one_row
            and (c.get("sampling") == HOT) == hot]


def _batch_rows(result: dict) -> str:
    """'8' (or '4-8' when kinds differ): the rows of the batch cases, for headings."""
    counts = sorted({c["rows"] for c in _cases(result, False)})
    return "-".join(map(str, counts[:1] + counts[1:][-1:])) or "0"


def _protocol(result: dict) -> str:
    seed, parts = result["settings"]["seed"], []
    for c in _cases(result, False)[:1]:
        parts.append(f"Each method runs at each window on one batch of {c['rows']} rows ({c['prompts']} prompts x "
                     f"{c['samples']} samples, row r with seed {seed} + r), beside `ar` on the same rows.")
    for c in _cases(result, True)[:1]:
        parts.append(f"The 1-row runs: {c['rows']} rows one at a time ({c['prompts']} prompts x {c['samples']}, "
                     f"seeds {seed}..{seed + c['rows'] - 1}), at the default window.")
    return " ".join(parts + _trimmed(result))


def _trimmed(result: dict) -> list[str]:
    """Which grid sweeps stop short of their kind's widest window (cases.WINDOW_CAPS), read from the figures."""
    kind_widest, method_widest = {}, {}
    for r in count_rows(result):
        if r["name"] != "ar" and r["kind"] in GRID_KINDS:
            kind_widest[r["kind"]] = max(kind_widest.get(r["kind"], 0), r["window"])
            key = (r["kind"], r["method"])
            method_widest[key] = max(method_widest.get(key, 0), r["window"])
    short = [f"{kind} `{method}` at w={w}" for (kind, method), w in method_widest.items() if w < kind_widest[kind]]
    if not short:
        return []
    return ["These sweeps stop early, where wider windows gain little, to save time (benchmarks/README.md): "
            + ", ".join(short) + "."]


def _given_note(result: dict) -> str:
    """How forwards that commit no generated token are counted, with the numbers of this run (if any)."""
    ar = [r for r in count_rows(result) if r["name"] == "ar" and r["generated_forwards_per_row"] < r["nfe_per_row"]]
    if not ar:
        return ""
    n, generated = ar[0]["nfe_per_row"], ar[0]["generated_forwards_per_row"]
    return (f" On {ar[0]['kind']}, `ar` spends {n - generated:.0f} of its {n:.0f} forwards on given or structural "
            "tokens alone (the engine takes such a run in the forward of the token after it, so these are runs that "
            "end the layout); counting every forward, as the quick suite does, gives the ratio in brackets where it "
            "differs.")


def _text_sampling(result: dict) -> str:
    text = [c for c in result["cases"] if c["case"] == "CountCase" and c["kind"] == "text"]
    return sampling_name(text[0]["sampling"] or result["settings"]["default_sampling"]["text"]) if text else "-"


def _pivot(title: str, rows: list[dict], kinds: tuple, cell) -> list[str]:
    rows = [r for r in rows if r["kind"] in kinds and r["name"] != "ar"]
    if not rows:
        return []
    windows = sorted({r["window"] for r in rows})
    lines = [f"## {title}", "", "| model | method | " + " | ".join(f"w={w}" for w in windows) + " |",
             "|---|---|" + "---|" * len(windows)]
    for kind in kinds:
        for method in dict.fromkeys(r["method"] for r in rows if r["kind"] == kind):
            cells = {r["window"]: cell(r) for r in rows if r["kind"] == kind and r["method"] == method}
            lines.append(f"| {kind} | {method} | " + " | ".join(cells.get(w, "") for w in windows) + " |")
    return lines + [""]


def _batch_and_single(result: dict, rows_label: str) -> list[str]:
    single = {(r["kind"], r["method"]): r for r in at_default(result, one_row=True)}
    rows = at_default(result)
    if not rows:
        return []
    lines = [f"## At the default window: the {rows_label}-row batch and the 1-row runs", "",
             ("| model | method | window | NFE ratio, batch (per row) | batch ratio | NFE ratio, 1-row runs | "
              "mean acceptance length, batch / 1-row | rows identical to `ar` (batch, 1-row) |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one = single.get((r["kind"], r["method"]))
        cells = [r["kind"], r["method"], r["window"], _ratio(r), f"{r['batch_nfe_ratio']:.2f}x",
                 _ratio(one) if one else "-",
                 f"{r['generated_mean_acceptance_length']:.2f} / "
                 + (f"{one['generated_mean_acceptance_length']:.2f}" if one else "-"),
                 f"{r['identical_to_ar']}/{r['rows']}, " + (f"{one['identical_to_ar']}/{one['rows']}" if one else "-")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + ["", ("`exact` must give `ar`'s tokens on every row (with the measuring verifier wrapped around its "
                         "own); the others draw other samples of the same law. Text rows end at EOS, so their NFE "
                         "ratio compares rows of different lengths: read the mean acceptance length."), ""]


def _per_slot(result: dict, rows_label: str) -> list[str]:
    rows = at_default(result)
    if not rows:
        return []
    groups = slot_groups(max(r["window"] for r in rows) - 1)
    lines = [f"## Acceptance per window slot (default window, {rows_label} rows)", "",
             ("Share of forwards in which the draft at slot j was accepted into the committed prefix (all drafts "
              "before it accepted too): `Stats.acceptance_per_position`, averaged over the slots of each column. "
              "Summed over all slots it is the accepted drafts per forward, so 1 + that sum is about the committed "
              "tokens per forward (given tokens count among the committed ones, never as accepted)."),
             "", "| model | method | window | " + " | ".join(g for g, _ in groups) + " |",
             "|---|---|---|" + "---|" * len(groups)]
    for r in rows:
        cells = [_f(group_mean(r["acceptance_per_position"], slots), ".3f") for _, slots in groups]
        lines.append(f"| {r['kind']} | {r['method']} | {r['window']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _diagnosis(result: dict, rows_label: str) -> list[str]:
    rows = [r for r in at_default(result) if r["diagnosis"].get("tv")]
    if not rows:
        return []
    ar = {r["kind"]: r["diagnosis"].get("mean_entropy") for r in count_rows(result) if r["name"] == "ar"}
    lines = ["## Why: TV between successive Jacobi iterations, and the entropy of p", "",
             ("A draft carried to the next iteration stores q = its p from the previous iteration; it is accepted "
              "with probability 1 - TV(q, p_new) under maximal coupling (`coupled`, `jacobi` and `gumbel` verify by "
              "rejection sampling, so this is their acceptance), and with at least (1-TV)/(1+TV) under `exact`'s "
              "Gumbel coupling. Measured by wrapping each method's verifier (`benchmarks/suite/measure.py`), over "
              f"carried drafts (q not one-hot) at the default window, {rows_label} rows. Entropy of p in nats, where tokens "
              "were committed (there p is plain AR's); `ar`'s over every generated position: "
              + ", ".join(f"{k} {_f(v)}" for k, v in ar.items()) + "."), "",
             ("| model | method | window | slot-0 acceptance | carried share, slot 0 | TV slot 0 | 1 - TV slot 0 | "
              "carried pass, slot 0 | TV slots 1+ | 1 - TV slots 1+ | carried pass, slots 1+ | forwards committing "
              "1 token | entropy of p |"), "|---" * 13 + "|"]
    for r in rows:
        d, c = r["diagnosis"], r["diagnosis"]["counts"]
        rest = range(1, len(d["tv"]))
        cells = [r["kind"], r["method"], r["window"], _f(r["acceptance_per_position"][0], ".3f"),
                 _f(d["carried_share"][0]), _f(d["tv"][0], ".3f"), _f(d["expected"][0], ".3f"),
                 _f(d["carried_pass"][0], ".3f"), _f(group_mean(d["tv"], rest, c["carried"]), ".3f"),
                 _f(group_mean(d["expected"], rest, c["carried"]), ".3f"),
                 _f(group_mean(d["carried_pass"], rest, c["carried"]), ".3f"), _f(r["single_share"], ".0%"),
                 _f(d["mean_entropy"])]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    groups = slot_groups(max(len(r["diagnosis"]["tv"]) for r in rows))
    lines += ["", "Mean TV(q, p_new) of carried drafts per window slot:", "",
              "| model | method | " + " | ".join(g for g, _ in groups) + " |", "|---|---|" + "---|" * len(groups)]
    for r in rows:
        d = r["diagnosis"]
        cells = [_f(group_mean(d["tv"], slots, d["counts"]["carried"]), ".3f") for _, slots in groups]
        lines.append(f"| {r['kind']} | {r['method']} | " + " | ".join(cells) + " |")
    return lines + [""] + _slot0_lines(rows) + [""]


def _slot0_lines(rows: list[dict]) -> list[str]:
    """One sentence per method: for Jacobi windows, slot 0, where the committed prefix first breaks; for a draft
    model, the ceiling its acceptance allows."""
    lines = []
    for r in rows:
        d = r["diagnosis"]
        rest = range(1, len(d["tv"]))
        if r["name"] == "draft-model":
            lines.append(_draft_ceiling(r))
            continue
        lines.append(
            f"- {r['kind']} `{r['method']}` w={r['window']}: the slot-0 draft is accepted in "
            f"{r['acceptance_per_position'][0]:.2f} of forwards ({d['carried_share'][0]:.0%} of slot-0 drafts are "
            f"carried, at TV {d['tv'][0]:.2f} from the new p: 1 - TV = {d['expected'][0]:.2f}), against 1 - TV = "
            f"{_f(group_mean(d['expected'], rest, d['counts']['carried']))} at later slots; "
            f"{r['single_share']:.0%} of forwards commit a single generated token."
            + (" Slot 0's TV is above the later slots': it is what limits acceptance, since a forward commits more "
               "than one generated token only when slot 0 passes." if _slot0_worst(d) else ""))
    return lines


def _slot0_worst(d: dict) -> bool:
    """Whether carried drafts at slot 0 are further from their new p than those at later slots, on average."""
    later = group_mean(d["tv"], range(1, len(d["tv"])), d["counts"]["carried"])
    return d["tv"][0] is not None and later is not None and d["tv"][0] > later


def _draft_ceiling(r: dict) -> str:
    """Leviathan et al.'s expected tokens per forward, (1 - a^L) / (1 - a) with L - 1 drafts, and its limit
    1 / (1 - a) at any window, from the acceptance a = 1 - mean TV(q_draft, p) measured here."""
    a, L = 1 - r["diagnosis"]["mean_tv"], r["window"]
    return (f"- {r['kind']} `{r['method']}` w={L}: TV(q_draft, p) averages {r['diagnosis']['mean_tv']:.2f}, so a draft "
            f"is accepted with a = {a:.2f}; slots accepted independently would commit (1 - a^L)/(1 - a) = "
            f"{(1 - a ** L) / (1 - a):.2f} tokens per forward at L = {L} (measured "
            f"{r['generated_mean_acceptance_length']:.2f}) and at most 1/(1 - a) = {1 / (1 - a):.2f} at any window "
            "(derived from the measured TV, Leviathan et al.'s formula).")


def _targets(result: dict, rows_label: str) -> list[str]:
    rows = count_rows(result)
    checks = []
    for kind, target in TARGETS.items():
        grid_kind = kind.split()[0]
        if kind == "text":
            pool = [r for r in rows if r["kind"] == "text" and r["name"] == "draft-model"
                    and r["window"] == TEXT_TARGET_WINDOW]
            value = lambda r: r["generated_mean_acceptance_length"]  # noqa: E731
            what = f"draft-model mean acceptance length at w={TEXT_TARGET_WINDOW}"
        else:
            pool = [r for r in rows if r["kind"] == grid_kind and r["name"] != "ar"
                    and (r["name"] == "exact") == kind.endswith("exact")]
            value = lambda r: r["generated_nfe_ratio"]  # noqa: E731
            what = f"{grid_kind} NFE ratio" + (" (exact)" if kind.endswith("exact") else " (any method)")
        if pool:
            best = max(pool, key=value)
            met = "met" if value(best) >= target else "**not met**"
            checks.append(f"| {what} | {target} | {value(best):.2f} ({best['label']}) | {met} |")
    if not checks:
        return []
    return [f"## The issue's targets: best measured value ({rows_label} rows)", "", "| target | wanted | best measured | |",
            "|---|---|---|---|", *checks, ""]


def _nfe(r: dict) -> float:
    return r["generated_nfe_ratio"]


# the figures of the temperature-1 table: figure, format, unit
HOT_FIGURES = ((_nfe, ".2f", "x"), (lambda r: r["generated_mean_acceptance_length"], ".2f", ""),
               (lambda r: r["acceptance_per_position"][0], ".3f", ""))


def _hot(result: dict) -> list[str]:
    """The 1-row runs again at temperature 1 without top-k / top-p, each method beside its figures at the default
    sampling, and per kind which methods gain or lose there, heads in particular."""
    hot = at_default(result, one_row=True, hot=True)
    if not hot:
        return []
    default = {(r["kind"], r["method"]): r for r in at_default(result, one_row=True)}
    used = {c["kind"]: sampling_name({k: v for k, v in (c.get("sampling_used") or HOT).items() if v is not None})
            for c in _cases(result, True, hot=True)}
    entropy = {(r["kind"], h): r["diagnosis"].get("mean_entropy") for h in (False, True)
               for r in count_rows(result, True, h) if r["name"] == "ar"}
    lines = ["## At temperature 1, no top-k (1-row runs)", "",
             ("The 1-row runs again, same prompts and seeds, with temperature 1 and no top-k / top-p over each model's "
              "default sampling (its CFG kept): " + "; ".join(f"{k}: {v}" for k, v in used.items()) + ". Ratios "
              "against `ar` at the same sampling; after each /, the same method's figure at the default sampling "
              "(the 1-row runs above). Entropy of p under `ar`, at temperature 1 / at the default: "
              + ", ".join(f"{k} {_f(entropy.get((k, True)), '.3f')} / {_f(entropy.get((k, False)), '.3f')} nats"
                          for k in used)
              + "."), "",
             ("| model | method | window | NFE ratio | mean acceptance length | slot-0 acceptance | rows identical to "
              "`ar` |"), "|---|---|---|---|---|---|---|"]
    for r in hot:
        d = default.get((r["kind"], r["method"]))
        cells = [r["kind"], r["method"], r["window"]] + [
            f"{_f(fig(r), fmt, unit)} / {_f(fig(d) if d else None, fmt, unit)}" for fig, fmt, unit in HOT_FIGURES]
        lines.append("| " + " | ".join(map(str, cells + [f"{r['identical_to_ar']}/{r['rows']}"])) + " |")
    lines.append("")
    for kind in used:
        lines.append(_hot_line(kind, [r for r in hot if r["kind"] == kind], default))
    return lines + ["", ("Counted in target forwards: a head's own forwards are not counted, so where a head only "
                         "ties the best method without one, it loses in time."), ""]


SAME = 0.02  # NFE ratios this close (relative) are reported as unchanged: 2 rows do not resolve less


def _hot_line(kind: str, rows: list[dict], default: dict) -> str:
    """Which methods gain or lose NFE ratio from the default sampling to temperature 1 (`rows`), and at each
    sampling whether each head (method `eagle`) beats the best method without one."""
    pairs = [(r, default[kind, r["method"]]) for r in rows if (kind, r["method"]) in default]  # (t 1, default)
    pairs.sort(key=lambda p: _nfe(p[0]) / _nfe(p[1]), reverse=True)

    def moved(low: float, high: float) -> str:
        return ", ".join(f"`{t1['method']}` {_nfe(d):.2f}x -> {_nfe(t1):.2f}x" for t1, d in pairs
                         if low <= _nfe(t1) / _nfe(d) < high) or "none"

    line = (f"- {kind}, NFE ratio from the default sampling to temperature 1 (by relative change): gain "
            f"{moved(1 + SAME, float('inf'))}; within {SAME:.0%}: {moved(1 - SAME, 1 + SAME)}; "
            f"lose {moved(0, 1 - SAME)}.")
    heads = [r["method"] for r in rows if r["name"] == "eagle"]
    if not heads:
        return line + " No head ran on this model."
    for head in heads:
        pools = (("temperature 1", rows), ("the default sampling", [d for _, d in pairs]))
        verdicts = [f"at {name} {v}" for name, pool in pools if (v := _head_verdict(head, pool))]
        line += f" The head `{head}`: " + "; ".join(verdicts) + "."
    return line


def _head_verdict(head: str, pool: list[dict]) -> str | None:
    """'1.52x against 1.60x for `pac`, the best without a head: it does not pay (plain `exact` 1.41x)' (None:
    nothing to compare). Plain `exact` gives the same tokens as a head verified by `exact`: a paired comparison."""
    mine, others = next((r for r in pool if r["method"] == head), None), [r for r in pool if r["name"] != "eagle"]
    if mine is None or not others:
        return None
    best, exact = max(others, key=_nfe), next((r for r in others if r["method"] == "exact"), None)
    return (f"{_nfe(mine):.2f}x against {_nfe(best):.2f}x for `{best['method']}`, the best without a head: "
            + ("it pays" if _nfe(mine) > _nfe(best) else "**it does not pay**")
            + (f" (plain `exact` {_nfe(exact):.2f}x)" if exact is not None and exact is not best else ""))


def _published() -> list[str]:
    lines = ["## Published reference points (other models and data; not measured here)", "",
             ("From the papers named in each row (SCD rows come from secondary notes, to be checked against the "
              "paper's tables). Steps (NFE) ratios against AR; points, not curves."), "",
             "| method | model | kind | window | ratio | source | note |", "|---|---|---|---|---|---|---|"]
    for p in PUBLISHED:
        lines.append(f"| {p.method} | {p.model} | {p.kind} | {p.window} | {p.ratio:.2f}x | {p.source} | {p.note} |")
    return lines + [""]
