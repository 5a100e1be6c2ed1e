"""mmspec command line: generate images / videos / text, benchmark methods, convert checkpoints."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
import warnings
from pathlib import Path

from mmspec import interrupt
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW, OPTIONS, REGISTRY, Spec, check_method, takers
from mmspec.options import (BATCH_SIZE_HELP, CONCURRENCY, CONCURRENCY_HELP, NUM_OUTPUTS, NUM_OUTPUTS_HELP,
                            OVERWRITE_HELP, SEED_HELP, SLOTS, SLOTS_HELP)
from mmspec.sampling import Sampling
from mmspec.window import MAX_WINDOW, WINDOWS, window_help

KINDS = ("image", "video", "text")
DEFAULT_BENCH_METHODS = "jacobi,coupled,gumbel,exact,lookup"
IMG_SIZE_HELP = ("image, a Janus folder: the images' side in pixels, as deepseek's generate takes img_size (a multiple "
                 "of its 16 pixels a token; default: the model's own, 384)")


def _pipeline(args, remember: bool = False):
    """The pipeline for args.kind (its bundled model unless --model), whatever the folder's family; `remember`: its
    auto windows start from what earlier processes measured on this machine, and keep what this one measures (the
    window cache)."""
    from mmspec.pipelines import load_pipeline

    return load_pipeline(args.kind, args.model, args.draft, getattr(args, "device", "cpu"),
                         window_cache=None if remember else "off", compile=args.compile,
                         allow_torchscript=args.allow_torchscript, door=_door(args), img_size=args.img_size)


def _door(args) -> str:
    """The door of mmspec.families a command is: generate, bench, or bench --prompts (the field's table)."""
    return args.command if args.command == "generate" or args.prompts is None else "table"


def _has_draft_model(args) -> bool:
    """Whether the pipeline will hold a draft model: text, with its bundled model (it comes with one) or --draft."""
    return args.kind == "text" and (args.model is None or args.draft is not None)


def _check_resource(spec: Spec, args, option: str) -> None:
    """A spec that names no draft model takes the pipeline's, one that names no head the model folder's head/:
    refuse a pipeline without it before it loads."""
    if spec.needs == "model" and not _has_draft_model(args):
        raise ValueError(f"{option}: this method needs a draft model, which only text has (its bundled model's, "
                         "or --model DIR --draft DIR)")
    if spec.needs == "head" and args.kind is not None:
        from mmspec.pipelines import model_folder
        from mmspec.pipelines.base import head_folder

        model = model_folder(args.kind, args.model)
        if model.is_dir():  # (no model folder at all: loading it says so)
            try:
                head_folder(model)
            except FileNotFoundError as err:
                raise FileNotFoundError(f"{option}: {err}") from None


FLAGS = tuple(name for name, option in OPTIONS.items() if option.flag is not None)  # method options with a flag


def _method(args) -> Spec:
    """The spec of --method and the method flags given, parsed once."""
    options = {}
    for name in FLAGS:
        value = getattr(args, name)
        if value is not None:
            options[name] = OPTIONS[name].parse(value) if OPTIONS[name].parse and isinstance(value, str) else value
    return Spec.parse({"name": args.method, **options})


def _given_sampling(args) -> dict:
    return {k: v for k, v in {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                              "cfg_scale": args.cfg_scale}.items() if v is not None}


def _sampling(args) -> dict | None:
    """The sampling options given, which the pipeline merges over the model's defaults."""
    return _given_sampling(args) or None


def _window_arg(text: str) -> "int | str":
    """--window's text -> an int or a registered policy's name (mmspec.window.WINDOWS)."""
    window = int(text) if text.lstrip("-").isdigit() else text
    if isinstance(window, str) and (window not in WINDOWS or window == "fixed"):
        names = ", ".join(repr(name) for name in WINDOWS if name != "fixed")
        raise argparse.ArgumentTypeError(f"expected an int in [1, {MAX_WINDOW}] or {names}, got {text!r}")
    return window


def _check_options(args) -> Spec:
    """Everything that can be checked without a model, checked before any model loads -> the method's spec."""
    if isinstance(args.window, int) and not 1 <= args.window <= MAX_WINDOW:
        raise ValueError(f"--window must be in [1, {MAX_WINDOW}], got {args.window}")
    if args.num < 1:
        raise ValueError(f"--num-outputs must be >= 1, got {args.num}")
    _check_seed(args)
    _check_prompts(args)
    if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    _check_family(args)
    spec = _method(args)  # unknown --init policies, bad --proactive shapes, --head
    check_method(spec, has_draft_model=True)
    _check_resource(spec, args, f"--method {args.method}")
    for name in ("image", "mask"):
        path = getattr(args, name, None)
        if path is not None and not Path(path).is_file():
            raise ValueError(f"--{name}: no file at {path}")
    if getattr(args, "image", None) is not None and args.kind == "text":
        raise ValueError("--image is for video (first frame) and image (inpainting with --mask), not text")
    Sampling(**_given_sampling(args))  # NaN, negative temperature, top-p outside (0, 1]...
    if args.cfg_scale is not None and args.cfg_scale < 0:  # (the library takes it: guidance away from the prompt)
        raise ValueError(f"--cfg-scale must be >= 0 (0: the model without the prompt, 1: no guidance, above 1: "
                         f"stronger guidance; a negative scale steers away from the prompt), got {args.cfg_scale:g}")
    return spec


def _check_family(args) -> None:
    """What the model folder's family (mmspec.families) refuses of this command, before any model loads: the door, a
    folder of another kind, --draft / --allow-torchscript / --image / --mask / --video it does not take, CFG where it
    has none; and the prompt or clips a command needs (a family that takes a video, Cosmos, continues one without a prompt and is
    benchmarked over clips)."""
    from mmspec.families import check, family_of, kind_of, rule

    if args.model is not None and args.kind is None and Path(args.model).is_dir():  # bench --model F: F's kind
        args.kind = kind_of(args.model, family_of(args.model))
    if args.kind is None:
        return
    pictures = [name for name in ("image", "mask", "video") if getattr(args, name, None) is not None]
    family = check(args.model, args.kind, _door(args), inputs=pictures, draft=args.draft,
                   allow_torchscript=args.allow_torchscript, img_size=args.img_size)
    if family.cfg_check is not None:  # a family without CFG refuses a scale other than 1
        rule(family.cfg_check)(getattr(args, "cfg_scale", None))
    video = getattr(args, "video", None)
    if video is not None and not Path(video).is_file():
        raise ValueError(f"--video: no file at {video}")
    continues = "video" in family.inputs
    if getattr(args, "videos", None) is not None and not continues:
        raise ValueError("--videos benchmarks a model that continues videos (a Cosmos folder): "
                         "mmspec bench video --model FOLDER --videos DIR")
    if args.command == "bench" and args.prompts is None and continues and args.videos is None:
        raise ValueError(f"a {family.title} model is benchmarked over clips: mmspec bench video --model FOLDER "
                         "--videos DIR")
    if args.command == "generate" and args.prompt is None and not continues:
        raise ValueError("generate needs a prompt (only a model that continues a --video, Cosmos, runs without one)")


def _check_prompts(args) -> None:
    """An empty prompt is refused before any model loads, as the demo refuses it."""
    from mmspec.pipelines.prompts import check_prompt

    given = getattr(args, "prompt", None)  # (generate: one; bench: a list or None)
    for prompt in [given] if isinstance(given, str) else given or []:
        check_prompt(prompt)


def _check_seed(args) -> None:
    """Seeds are 64-bit patterns: a larger one would wrap onto a smaller one's outputs (render jobs refuse them too)."""
    from mmspec.rng import MAX_SEED

    if not 0 <= args.seed <= MAX_SEED - (args.num - 1):
        raise ValueError(f"--seed must be in [0, 2**63-1] for every output (seed + {args.num - 1} at --num-outputs "
                         f"{args.num}), got {args.seed}")


def _use_threads(args) -> None:
    """torch's CPU threads for a command that runs models in this process: --threads, else no more than the cores
    free now (mmspec.threads), said on stderr when that is fewer than torch would use."""
    import torch

    from mmspec.threads import use_cpu_threads

    if args.threads is None and getattr(args, "device", "cpu") != "cpu":
        return  # (a run on an accelerator: torch's threads)
    default = torch.get_num_threads()
    threads = use_cpu_threads(args.threads)
    if args.threads is None and threads < default:
        print(f"mmspec: {threads} CPU thread(s) of {default}: other work holds the other cores, and torch's threads "
              "would wait on each other (--threads N to choose)", file=sys.stderr)


def _check_writable(folder: "str | Path", keep: bool = True) -> Path:
    """Refuses a folder that cannot be written, before any work, and makes it; keep=False removes the folders it made
    to try, for a command that makes its folder when it writes there: a refusal after the check leaves none."""
    folder = Path(folder)
    made = [] if keep else [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"cannot write to --out {folder}: {err.strerror or err}") from None
    finally:
        for path in made:
            if path.is_dir():
                path.rmdir()
    return folder


def _common(p: argparse.ArgumentParser, kind_nargs: str | None = None, window=DEFAULT_WINDOW):
    p.add_argument("kind", choices=KINDS, nargs=kind_nargs, help="what to generate: " + ", ".join(KINDS))
    p.add_argument("--model", help="model folder (default: the bundled model for the kind)")
    p.add_argument("--draft", help="text: a draft model folder, for the methods that draft with one")
    p.add_argument("--method", default=DEFAULT_METHOD, choices=sorted(REGISTRY),
                   help=f"default {DEFAULT_METHOD}: the same tokens as --method ar with the same seed; eagle: a draft "
                        "head on the target's features, the model folder's head/ unless --head")
    for name in FLAGS:
        p.add_argument(f"--{name}", help=f"{', '.join(takers(name))}: {OPTIONS[name].help}", **OPTIONS[name].flag)
    p.add_argument("--window", type=_window_arg, default=window,
                   help=window_help()
                        + ("; generate keeps what auto measured in $MMSPEC_WINDOW_CACHE, default "
                           "~/.cache/mmspec/windows, 'off' to forget" if window == "auto" else "; auto measures afresh in every run")
                        + "; default: " + ("auto" if window == "auto" else "16 image, 64 video, 6 text"))
    p.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    p.add_argument("--num-outputs", "--num", dest="num", type=int, default=NUM_OUTPUTS,
                   help=NUM_OUTPUTS_HELP + "; --num: its old name, until 0.2")
    p.add_argument("--max-new-tokens", type=int, default=64, help="text only")
    for name, typ in (("temperature", float), ("top-k", int), ("top-p", float), ("cfg-scale", float)):
        p.add_argument(f"--{name}", type=typ, help="override the model's default sampling")
    p.add_argument("--image", help="video: the first frame (image-to-video); image: the picture to inpaint")
    p.add_argument("--mask", help="image: inpainting mask, nonzero where to regenerate")
    p.add_argument("--video", help="video, a Cosmos folder: the given frames (MP4, GIF...), encoded and kept; "
                                   "the model continues them")
    p.add_argument("--allow-torchscript", action="store_true",
                   help="load a Cosmos folder's video tokenizer, which NVIDIA ships as TorchScript (code that runs)")
    p.add_argument("--img-size", type=int, metavar="PIXELS", help=IMG_SIZE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the decode step (one graph per L, CUDA graphs on a GPU): for a GPU, "
                        "and on a CPU for long runs at one row (benchmarks/README.md); the same tokens either way")


def cmd_generate(args) -> dict:
    spec = _check_options(args)
    out_dir = _check_writable(args.out, keep=False)  # (the outputs' save makes it)
    _use_threads(args)
    pipe = _pipeline(args, remember=True)
    call = dict(num_outputs=args.num, seed=args.seed, window=args.window, sampling=_sampling(args),
                progress_bar=not args.json, batch_size=args.batch_size)
    if args.kind == "text":
        call["max_new_tokens"] = args.max_new_tokens
    call.update(_given_pictures(args))
    if args.compare:
        from mmspec.bench import compare, format_comparison

        comparison = compare(lambda method: pipe(args.prompt, method=method, **call), spec)
        out = comparison.pop("output")
        comparison.pop("ar_output")
    else:
        out = pipe(args.prompt, method=spec, **call)
    paths = [str(p) for p in out.save(out_dir, overwrite=args.overwrite)]
    result = {"kind": args.kind, "prompt": args.prompt, "method": args.method, "window": args.window,
              "outputs": paths, "stats": out.summary}
    if args.compare:
        result["compare"] = comparison
    if not args.json:
        print("\n".join(paths))
        if args.kind == "text":
            print(out.prompts[0] + out.texts[0])
        print(" ".join(f"{k}={v}" for k, v in out.summary.items()))
        if args.compare:
            print(format_comparison(args.method, comparison))
    return result


def cmd_bench(args) -> dict:
    """One kind: every method against AR, then the lossless check; --suite: a whole suite into a folder."""
    from mmspec.bench import PROMPTS, environment, format_table, run_benchmark
    from mmspec.lossless import check_lossless

    if args.videos is not None and args.kind is None:  # clips are video: `mmspec bench --model F --videos D`
        args.kind = "video"
    if args.prompts is not None:
        return _bench_table(args)
    _check_bench_options(args)
    _use_threads(args)
    if args.suite is not None:
        return _bench_suite(args)
    if args.videos is not None:
        return _bench_videos(args)
    methods = _bench_methods(args)
    if args.out:
        args.out = _unused(args.out, args)
        _check_writable(args.out.parent)
    pipe = _pipeline(args)
    prompts = args.prompt or PROMPTS[args.kind]
    if args.window is None:  # methods are compared at the pipeline's default window unless told otherwise
        args.window = pipe.default_window
    call = dict(num_outputs=args.num, seed=args.seed, window=args.window, sampling=_sampling(args))
    if args.kind == "text":
        call["max_new_tokens"] = args.max_new_tokens
    call.update(_given_pictures(args))
    rows = run_benchmark(pipe, prompts, methods, repeats=args.repeats or 1, **call)
    check = check_lossless(pipe, prompts, methods, outputs={r["name"]: r.pop("output") for r in rows}, **call)
    result = {"kind": args.kind, "prompts": prompts, "window": args.window, "num": args.num,
              "environment": environment(args.device), "results": rows, "lossless": check}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    if not args.json:
        print(format_table(rows))
        if args.out:
            print(args.out)
    return {**result, "exit_status": _report_lossless([check], args.json)}


def _bench_videos(args) -> dict:
    """A video continuation model (a Cosmos folder) over a folder of clips: AR and --methods (default coupled) at
    --window (default 64), steps compression and latency speed-up (mmspec.video_bench)."""
    from mmspec.bench import environment
    from mmspec.video_bench import DEFAULT_VIDEO_METHODS, bench_videos, format_video_table, video_files

    videos = video_files(args.videos)
    methods = _bench_methods(args) if args.methods else list(DEFAULT_VIDEO_METHODS)
    if args.out:
        args.out = _unused(args.out, args)
        _check_writable(args.out.parent)
    pipe = _pipeline(args)
    window = 64 if args.window is None else args.window
    result = bench_videos(pipe, videos, methods, prompt=args.prompt[0] if args.prompt else None,
                          repeats=args.repeats or 1, num_outputs=args.num, seed=args.seed, window=window,
                          sampling=_sampling(args))
    result = {"kind": "video", "model": args.model, "window": window, "environment": environment(args.device), **result}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.json:
        print(format_video_table(result))
    return result


def _bench_table(args) -> dict:
    """--model FOLDER --prompts FILE: the field's table (mmspec.tables) as table.json and table.md in --out."""
    import torch

    from mmspec.pipelines import load_pipeline
    from mmspec.tables import DEFAULT_TABLE_METHODS, PromptFile, format_markdown, table

    if args.model is None or args.suite is not None or args.prompt:
        raise ValueError("--prompts FILE runs the field's table on one model: mmspec bench --model FOLDER --prompts FILE "
                         "(no --suite, no --prompt)")
    args.methods = args.methods or DEFAULT_TABLE_METHODS
    _check_table_kind(args.kind)  # the kind given, before the folder is read
    _check_bench_options(args)  # what the folder's family refuses; its kind when none is given
    _check_table_kind(args.kind)
    inputs = PromptFile(args.prompts, args.limit)
    out = _check_writable(_unused(args.out or Path("benchmarks/results/table"), args))
    _use_threads(args)
    compile = args.compile or torch.device(args.device).type == "cuda"  # the papers' latencies are of compiled GPU runs
    pipe = load_pipeline("image", args.model, device=args.device, window_cache="off", compile=compile, door="table",
                         img_size=args.img_size)
    result = table(pipe, inputs, _bench_methods(args), model=args.model, device=args.device, repeats=args.repeats or 1,
                   out=out, window=args.window or pipe.default_window, seed=args.seed, num_outputs=args.num,
                   sampling=_sampling(args))
    if not args.json:
        print(format_markdown(result))
        print(f"{out / 'table.json'}\n{out / 'table.md'}")
    exact = [r for r in result["rows"] if r["name"] == "exact"]
    return {**result, "exit_status": int(any(r["identical_inputs"] != r["inputs"] for r in exact))}


def _check_table_kind(kind: "str | None") -> None:
    if kind not in (None, "image"):
        raise ValueError(f"--prompts runs image models; {kind} takes mmspec bench {kind} --model FOLDER")


def _unused(out: "str | Path", args) -> Path:
    """Where bench results go: `out`, or beside earlier results there, numbered, unless --overwrite (files.unused)."""
    from mmspec.pipelines.files import unused

    return unused(out, args.overwrite)


def _given_pictures(args) -> dict:
    """image= / mask= / video= of the pipeline call, where given."""
    return {name: getattr(args, name) for name in ("image", "mask", "video") if getattr(args, name, None) is not None}


def _report_lossless(checks: list[dict], quiet: bool) -> int:
    """Print the lossless verdicts (a failure also on stderr, so that --json does not hide it) -> exit status."""
    from mmspec.lossless import format_lossless

    for check in checks:
        if not quiet:
            print(format_lossless(check))
        if not check["ok"]:
            print(format_lossless(check), file=sys.stderr)
    return 0 if all(c["ok"] for c in checks) else 1


def _suites(args):
    """The suites `python -m benchmarks.suite` gives `main` (a clone's benchmarks.suite): the package never imports
    the clone's benchmarks/, which a wheel has not."""
    if args.suites is None:
        raise ValueError(f"mmspec bench --suite runs a clone's suites: python -m benchmarks.suite {args.suite} "
                         "[KIND] [options] in a clone of the mmspec repository")
    return args.suites


def _bench_suite(args) -> dict:
    suites = _suites(args)
    if args.suite == "overhead":
        return _bench_overhead(args)
    out = _check_writable(_unused(args.out or Path("benchmarks/results") / args.suite, args))
    kinds = (args.kind,) if args.kind else KINDS
    # text has a draft model with the bundled models, or when one is given
    draft = "text" in kinds and (args.model is None or args.draft is not None)
    extra = {"rows": args.rows} if args.rows else {}
    if args.suite == "acceptance":  # the kinds whose model has a draft head run it too
        from mmspec.pipelines import model_folder
        from mmspec.pipelines.base import HEAD

        extra["heads"] = tuple(k for k in kinds if (model_folder(k, args.model) / HEAD).is_dir())
    cases = suites.SUITES[args.suite].cases(kinds=kinds, draft=draft, **extra)
    if args.repeats:
        cases = [dataclasses.replace(c, repeats=args.repeats) if hasattr(c, "repeats") else c for c in cases]
    result = suites.run_suite(cases, device=args.device, models={args.kind: args.model} if args.model else None,
                       draft=args.draft, seed=args.seed, max_new_tokens=args.max_new_tokens,
                       on_case=lambda partial: suites.write_json(partial, out / "results.json"))  # kept if stopped early
    result["suite"] = args.suite
    paths = suites.save(result, out, args.suite)
    if not args.json:
        print("\n".join(map(str, paths)))
        print(f"suite {args.suite}: {result['seconds']:.0f} s ({result['cpu_seconds']:.0f} s of CPU time)")
    checks = [c["check"] for c in result["cases"] if c["case"] == "LosslessCase"]
    return {**result, "exit_status": _report_lossless(checks, args.json)}


def _bench_overhead(args) -> dict:
    """The decode step split into forward / p / drafting / verification / commit / rest against a plain forward
    of the same model, per model, rows and method (benchmarks/overhead.py)."""
    from mmspec.pipelines.base import models_dir

    overhead = _suites(args).overhead
    models = [args.model] if args.model else [str(models_dir() / m) for m in overhead.BUNDLED
                                              if args.kind is None or _bundled_kind(m) == args.kind]
    out = _check_writable(_unused(args.out or Path("benchmarks/results") / "overhead", args))
    argv = [*models, "--out", str(out), "--threads", str(args.threads or 1)]
    argv += ["--rows", ",".join(map(str, args.rows))] if args.rows else []
    argv += ["--repeats", str(args.repeats)] if args.repeats else []
    result = overhead.main(argv)
    if not args.json:
        print((out / "overhead.md").read_text())
    return result


def _bundled_kind(model: str) -> str:
    return "video" if model.endswith("video") else "image"


def _rows_arg(text: str) -> tuple[int, ...]:
    try:
        rows = tuple(int(r) for r in text.split(","))
    except ValueError:
        rows = ()
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError(f"expected batch sizes like 1,4,8 (positive ints), got {text!r}")
    return rows


def _check_bench_options(args) -> None:
    """What `bench` can check before any model loads, with and without --suite."""
    import torch

    _check_options(args)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise ValueError(f"--device: unknown device {args.device!r} (e.g. cpu, cuda, cuda:1)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: no CUDA device here (torch.cuda.is_available() is False)")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.suite is None:
        if args.kind is None:
            raise ValueError(f"mmspec bench needs a kind ({', '.join(KINDS)}) or --suite NAME")
        if args.rows is not None:
            raise ValueError("--rows is for --suite; a single benchmark takes --num-outputs (outputs per prompt)")
        _bench_methods(args)
    else:
        _check_suite_options(args)
    for name in ("model", "draft"):
        path = getattr(args, name)
        if path is not None and not Path(path).is_dir():
            raise ValueError(f"--{name}: no model folder at {path}")


def _check_suite_options(args) -> None:
    given = [f"--{n}" for n in ("window", "methods", "prompt", *FLAGS, "image", "mask", "video", "videos")
             if getattr(args, n) is not None]
    given += ["--num-outputs"] * (args.num != NUM_OUTPUTS)
    given += [f"--{k.replace('_', '-')}" for k in _given_sampling(args)]
    if given:
        raise ValueError(f"{', '.join(given)}: not for --suite, which sets its own methods, windows, prompts, rows "
                         "and sampling (the models' defaults)")
    if args.model is not None and args.kind is None:
        raise ValueError("--suite with --model needs the model's kind: mmspec bench image --suite quick --model DIR")
    if args.draft is not None and args.kind != "text":
        raise ValueError("--draft is the draft of a text model: mmspec bench text --suite quick --model DIR --draft DIR")
    suites = _suites(args).SUITES
    if args.suite not in suites and args.suite != "overhead":
        raise ValueError(f"--suite: unknown suite {args.suite!r}; choose one of {sorted([*suites, 'overhead'])}")
    if args.suite != "overhead" and not suites[args.suite].timed:
        given = [f"--{n}" for n in ("rows", "repeats") if getattr(args, n) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: not for --suite {args.suite}, which counts forwards (nothing "
                             "timed) on its own prompts and rows")


def _bench_methods(args) -> list[str]:
    methods = [m.strip() for m in (args.methods or DEFAULT_BENCH_METHODS).split(",")]
    unknown = sorted(set(methods) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown --methods {unknown}; choose from {sorted(REGISTRY)}")
    for method in methods:
        _check_resource(Spec.parse(method), args, f"--methods {method}")
    return methods


def cmd_convert(args) -> dict:
    out = CONVERTERS[args.family](args)
    print(out)
    return {"out": str(out)}


def _convert_llamagen(args) -> Path:
    from mmspec.reference.checkpoint import convert_llamagen

    return convert_llamagen(args.checkpoint, args.out, allow_pickle=args.allow_pickle, model=args.model or "GPT-B",
                            image_size=args.image_size, model_type=args.type, num_classes=args.num_classes,
                            cls_token_num=args.cls_token_num, vocab_size=args.vocab_size)


def _convert_llamagen_vq(args) -> Path:
    from mmspec.tokenizers.llamagen import convert_llamagen_vq

    return convert_llamagen_vq(args.checkpoint, args.out, model=args.model or "VQ-16", allow_pickle=args.allow_pickle,
                               codebook_size=args.vocab_size)


def _convert_cosmos(args) -> Path:
    from mmspec.reference.cosmos_checkpoint import convert_cosmos

    try:
        shape = [int(x) for x in args.latent_shape.split(",")]
    except ValueError:
        shape = []
    if len(shape) != 3:
        raise ValueError(f"--latent-shape: expected FRAMES,ROWS,COLS (e.g. 5,40,64), got {args.latent_shape!r}")
    return convert_cosmos(args.checkpoint, args.out, allow_pickle=args.allow_pickle, model=args.model or "4b",
                          latent_shape=shape, tokenizer=args.tokenizer, text_encoder=args.text_encoder)


def _convert_janus(args) -> Path:
    from mmspec.adapters.janus_release import convert_janus

    return convert_janus(args.checkpoint, args.out, allow_pickle=args.allow_pickle)


def _convert_chameleon_vq(args) -> Path:
    from mmspec.tokenizers.chameleon import convert_chameleon_vq

    if args.config is None:
        raise ValueError("mmspec convert chameleon-vq needs --config vqgan.yaml (the VQGAN's yaml, beside vqgan.ckpt)")
    return convert_chameleon_vq(args.checkpoint, args.config, args.out, allow_pickle=args.allow_pickle)


CONVERTERS = {"llamagen": _convert_llamagen, "llamagen-vq": _convert_llamagen_vq, "cosmos": _convert_cosmos,
              "janus": _convert_janus, "chameleon-vq": _convert_chameleon_vq}


def cmd_models(args) -> dict:
    from mmspec.pipelines.subjects import describe

    lines = describe(args.model)
    print("\n".join(lines))
    return {"models": lines}


def cmd_demo(args) -> dict:
    try:
        from mmspec.demo import build_app, launch
    except ImportError as err:
        print(f'mmspec demo needs {err.name}: pip install -e ".[demo]"', file=sys.stderr)
        raise SystemExit(2)

    if args.model is not None:  # its family's kind's tab (mmspec.families)
        from mmspec.families import family_of, kind_of

        kind = kind_of(args.model, family_of(args.model))
        if getattr(args, f"{kind}_model") is not None:
            raise ValueError(f"--model {args.model} is a {kind} model, and --{kind}-model names another: give one")
        setattr(args, f"{kind}_model", args.model)
    _use_threads(args)
    app = build_app(args.image_model, args.video_model, args.text_model, args.text_draft, args.concurrency,
                    args.img_size, slots=args.slots)
    launch(app, args.host, args.port)
    return {}


def cmd_serve(args) -> dict:
    try:
        from mmspec.serve.server import Settings, api_key, serve
    except ImportError as err:
        print(f'mmspec serve needs {err.name}: pip install -e ".[serve]"', file=sys.stderr)
        raise SystemExit(2)
    from mmspec.serve.schemas import Limits

    limits = Limits(max_n=args.max_n, max_prompt_chars=args.max_prompt_chars, max_tokens=args.max_tokens,
                    max_seconds=args.max_seconds, max_body_bytes=args.max_body)
    settings = Settings(args.model, args.host, args.port, api_key(args.api_key), args.slots, args.max_queue, limits,
                        args.drain, args.device)
    if args.backend == "ray":
        from mmspec.serve.replicas import serve_replicas

        serve_replicas(settings, args.replicas, ray_address=args.ray_address)
        return {}
    _use_threads(args)
    cut = serve(settings)
    return {"cut_by_drain": cut}


def cmd_render(args) -> dict:
    from mmspec.render import render_job

    if args.backend == "local":  # (Ray's actors run one thread each)
        _use_threads(args)
    try:
        summary = render_job(args.job, args.out, backend=args.backend, ray_address=args.ray_address,
                             batch_size=args.batch_size)
    except OSError as err:  # a read-only folder, a full disk: what is recorded is complete (mmspec.render.store)
        if not _writing(err, args.out):
            raise
        raise ValueError(f"cannot write to --out {args.out} ({err.strerror or err}): the manifest there lists every "
                         "complete file; make room or fix the folder and rerun: only what is missing is rendered") \
            from err
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return {**summary, "exit_status": 1 if summary["failed"] else 0}


def _writing(err: OSError, folder: str) -> bool:
    """Whether `err` came from writing into `folder`: a full or read-only disk, or a file in it."""
    import errno

    inside = err.filename is not None and Path(str(err.filename)).resolve().is_relative_to(Path(folder).resolve())
    return inside or err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def cmd_train_head(args) -> dict:
    import torch

    from mmspec.train_head import TrainConfig, train_head

    if not (Path(args.model) / "config.json").is_file():
        raise FileNotFoundError(f"{args.model} is not a model folder (no config.json)")
    out = _check_writable(args.out) if args.out else None
    if args.threads:
        torch.set_num_threads(args.threads)
    options = {k: getattr(args, k) for k in ("samples", "batch", "epochs", "ttt", "lr", "seed", "draft_vocab")
               if getattr(args, k) is not None}
    folder = train_head(args.model, out, TrainConfig(**options), device=args.device)
    print(folder)
    return {"out": str(folder)}


def _threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, but no more than the cores "
                   "other work leaves free: threads that lose their core keep the others waiting at every op)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", help="on an error, show its traceback, not one line")
    gen = sub.add_parser("generate", parents=[debug], help="generate images, videos or text with speculation")
    _common(gen)
    gen.add_argument("prompt", nargs="?", help="the prompt (a Video2World folder: text with its local T5, or a "
                     ".safetensors file of T5 features, 'context'; a Cosmos base folder: none)")
    gen.add_argument("--out", default="out", help="output folder (default out): files are numbered after those "
                     "already there, so nothing is replaced unless --overwrite")
    gen.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    gen.add_argument("--batch-size", type=int, help=BATCH_SIZE_HELP)
    gen.add_argument("--compare", action="store_true",
                     help="also run plain AR (--method ar) with the same prompt, seed and sampling: forwards, "
                          "seconds and the speed-up, and for --method exact whether the tokens are identical")
    _threads_option(gen)
    gen.set_defaults(func=cmd_generate)
    bench = sub.add_parser("bench", parents=[debug], help="NFE, acceptance and wall-clock of methods against AR, "
                           "same run, and the lossless check (exact == ar, greedy agreement) on the model")
    _common(bench, kind_nargs="?", window=None)
    bench.add_argument("--methods", help=f"comma-separated (default {DEFAULT_BENCH_METHODS})")
    bench.add_argument("--prompt", action="append", help="a prompt (repeatable); default: a fixed set")
    bench.add_argument("--videos", metavar="DIR", help="video, a Cosmos folder: continue every clip in DIR with AR "
                       "and --methods (default coupled) at --window (default 64): steps compression and latency "
                       "speed-up, as SCD reports them")
    bench.add_argument("--prompts", metavar="FILE", help="with --model FOLDER: the field's table (steps compression, "
                       "latency against AR, acceptance, tokens/s; docs/usage.md) over a prompt file: one prompt a line, "
                       "or a PartiPrompts-style .tsv with a Prompt column (default methods "
                       "jacobi,coupled,gumbel,pac,exact; --out: a folder, default benchmarks/results/table)")
    bench.add_argument("--limit", type=int, metavar="N", help="--prompts: the first N prompts")
    bench.add_argument("--repeats", type=int, help="time each method this many times, keep the best (default 1; "
                       "the suite's own otherwise)")
    bench.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1... (default cpu)")
    _threads_option(bench)
    bench.add_argument("--suite", help="run a whole suite (a clone's: python -m benchmarks.suite NAME [KIND] "
                       "[options]); a kind restricts it to that kind. quick: image and video against batch size and window, text against transformers, "
                       "lossless checks; acceptance: forward counts, acceptance per window slot and its diagnosis "
                       "(TV between Jacobi iterations, entropy of p) against the window, beside published figures; overhead: "
                       "the decode step split into forward, p, drafting, verification and commit, beside a plain "
                       "forward of the same model (image and video)")
    bench.add_argument("--rows", type=_rows_arg, help="--suite: batch sizes, e.g. 1,8,32 (default 1,4,8, and 16 with the "
                       "default method alone)")
    bench.add_argument("--out", help="write the JSON results here; with --suite, a folder for JSON, markdown and "
                       "plots (default benchmarks/results/SUITE); where results are already, OUT-001, OUT-002...")
    bench.add_argument("--overwrite", action="store_true", help="write over the results at --out (default: beside "
                       "them, numbered)")
    bench.set_defaults(func=cmd_bench)
    render = sub.add_parser("render", parents=[debug],
                            help="render a job file into a folder: resumable, exactly once per output")
    render.add_argument("job", help="job file (YAML; see configs/)")
    render.add_argument("--out", required=True, help="output folder (files + manifest.jsonl)")
    render.add_argument("--backend", default="local", choices=["local", "ray"],
                        help="local: this process; ray: a Ray cluster's workers (default %(default)s)")
    render.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
    render.add_argument("--batch-size", type=int, help="rows per engine call (default: the job's)")
    _threads_option(render)
    render.set_defaults(func=cmd_render, json=False)
    conv = sub.add_parser("convert", parents=[debug],
                          help="convert a released checkpoint to a folder mmspec loads: llamagen (a GPT checkpoint -> a "
                               "reference GPT folder), llamagen-vq (its VQ, vq_ds16_c2i.pt -> a VQModel folder: put it "
                               "in the converted GPT's folder as vq/), cosmos (a Cosmos-1 autoregressive checkpoint), janus (deepseek's "
                               "Janus / Janus-Pro folder -> transformers' Janus), chameleon-vq (Chameleon's vqgan.ckpt "
                               "+ --config vqgan.yaml -> a VQModel folder: put it in the Chameleon model folder as vqgan/)")
    conv.add_argument("family", choices=sorted(CONVERTERS), help="the checkpoint's family")
    conv.add_argument("checkpoint", help="the checkpoint file (llamagen, llamagen-vq, cosmos) or the release's folder (janus)")
    conv.add_argument("out", help="the model folder to write")
    conv.add_argument("--config", help="chameleon-vq: the VQGAN's vqgan.yaml")
    conv.add_argument("--model", help="llamagen: GPT-B (default), GPT-L...; llamagen-vq: VQ-16 (default), VQ-8; cosmos: 4b (default), 12b, 5b, 13b "
                                      "(5b, 13b: Video2World)")
    conv.add_argument("--latent-shape", default="5,40,64", help="cosmos: the token grid, FRAMES,ROWS,COLS (default "
                      "5,40,64: 33 frames of 640x1024)")
    conv.add_argument("--tokenizer", help="cosmos: NVIDIA's tokenizer folder (encoder.jit, decoder.jit), copied into "
                      "OUT/tokenizer")
    conv.add_argument("--text-encoder", help="cosmos Video2World: a local T5 encoder folder (transformers, "
                      "safetensors) for text prompts, named in OUT/config.json")
    conv.add_argument("--type", default="c2i", choices=["c2i", "t2i"],
                      help="llamagen: class-to-image or text-to-image (default %(default)s)")
    conv.add_argument("--image-size", type=int, default=256,
                      help="llamagen: pixels per side it generates (default %(default)s)")
    conv.add_argument("--num-classes", type=int, default=1000, help="llamagen c2i: class labels (default %(default)s)")
    conv.add_argument("--cls-token-num", type=int, default=120, help="llamagen t2i: caption tokens (default %(default)s)")
    conv.add_argument("--vocab-size", type=int, default=16384,
                      help="llamagen, llamagen-vq: the VQ codebook's size (default %(default)s)")
    conv.add_argument("--allow-pickle", action="store_true", help="read a .pt with torch's weights-only unpickler")
    conv.set_defaults(func=cmd_convert, json=False)
    head = sub.add_parser("train-head", parents=[debug],
                          help="train an EAGLE-3 draft head for a model folder from its own samples (resumable)")
    head.add_argument("model", help="the target's folder (a bundled-style image, video or text model)")
    head.add_argument("--out", help="where the head goes (default MODEL/head; run again to resume)")
    head.add_argument("--samples", type=int, help="sequences generated and distilled (default 1024)")
    head.add_argument("--epochs", type=float, help="passes over them (default 4)")
    head.add_argument("--batch", type=int, help="sequences per step (default 16)")
    head.add_argument("--ttt", type=int, help="drafting steps trained in a row (default 3)")
    head.add_argument("--lr", type=float, help="peak learning rate (default 2e-3)")
    head.add_argument("--seed", type=int, help="prompts, samples and initial weights (default 0)")
    head.add_argument("--draft-vocab", type=int, help="a smaller draft vocabulary of the N tokens the samples use "
                      "most (EAGLE-3's d2t / t2d): a cheaper lm_head (default: the target's whole vocabulary)")
    head.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1... (default %(default)s)")
    head.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    head.set_defaults(func=cmd_train_head, json=False)
    models = sub.add_parser("models", parents=[debug], help="the bundled models (or the given ones) and the subjects "
                            "each draws, where its config lists them: a prompt should name one")
    models.add_argument("model", nargs="*", help="a bundled model's name (emoji-image...) or a model folder (default: "
                        "every bundled model)")
    models.set_defaults(func=cmd_models, json=False)
    demo = sub.add_parser("demo", parents=[debug], help="the Gradio demo on the bundled models (needs the demo extra)")
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s, this machine only; "
                      "0.0.0.0: reachable from other machines)")
    demo.add_argument("--port", type=int, help="port (default: the first free one from 7860)")
    demo.add_argument("--model", help="a model folder of any family: its kind's tab (image, video or text) runs it")
    for kind in KINDS:
        demo.add_argument(f"--{kind}-model", help=f"{kind} model folder (default: the bundled one)")
    demo.add_argument("--text-draft", help="a draft model folder for --text-model, for the methods that draft "
                      "with one")
    demo.add_argument("--concurrency", type=int, default=CONCURRENCY, help=CONCURRENCY_HELP)
    demo.add_argument("--slots", type=int, default=SLOTS, help=SLOTS_HELP)
    demo.add_argument("--img-size", type=int, metavar="PIXELS", help=IMG_SIZE_HELP)
    _threads_option(demo)
    demo.set_defaults(func=cmd_demo, json=False)
    serve = sub.add_parser("serve", parents=[debug], help="an HTTP service on one model: OpenAI's Images and "
                           "Completions APIs, server-sent progress, a bounded queue (needs the serve extra)")
    serve.add_argument("--model", required=True, help="a model folder of any family, or a bundled model's name "
                       "(emoji-image, emoji-video, code-text): its kind's path serves it (docs/serving.md)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s, this machine only; "
                       "any other needs --api-key)")
    serve.add_argument("--port", type=int, default=8000, help="port (default %(default)s; 0: a free one)")
    serve.add_argument("--api-key", help="the bearer token every request but /health must bear (default "
                       "$MMSPEC_API_KEY, which keeps it out of the process list)")
    serve.add_argument("--slots", type=int, default=CONCURRENCY, help="pipeline calls at a time, whose rows share one "
                       "decode (default %(default)s)")
    serve.add_argument("--max-queue", type=int, default=16, help="accepted requests waiting for a slot; past them, "
                       "429 with Retry-After (default %(default)s)")
    serve.add_argument("--max-n", type=int, default=4, help="outputs a request (default %(default)s)")
    serve.add_argument("--max-prompt-chars", type=int, default=2000, help="characters a prompt (default %(default)s)")
    serve.add_argument("--max-tokens", type=int, default=512, help="text: new tokens a completion (default "
                       "%(default)s)")
    serve.add_argument("--max-seconds", type=float, default=120.0, help="from acceptance to answer; past it the "
                       "request is stopped, 504 (default %(default)s)")
    serve.add_argument("--max-body", type=int, default=4 << 20, help="bytes a request body (default %(default)s)")
    serve.add_argument("--drain", type=float, default=30.0, help="seconds SIGTERM lets the accepted requests finish "
                       "before it answers those left with 503 (default %(default)s)")
    serve.add_argument("--backend", default="local", choices=["local", "ray"], help="local: this process; ray: Ray "
                       "Serve replicas of the same app (default %(default)s)")
    serve.add_argument("--replicas", type=int, default=1, help="ray: replicas, one model each (default %(default)s)")
    serve.add_argument("--ray-address", help="ray: an existing cluster (default: start a local one)")
    serve.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1... (default %(default)s)")
    _threads_option(serve)
    serve.set_defaults(func=cmd_serve, json=False)
    return parser


def main(argv: list[str] | None = None, suites=None) -> int:
    """`suites`: a clone's benchmarks.suite, for `bench --suite` (python -m benchmarks.suite gives it)."""
    parser = build_parser()
    misplaced = _option_before_the_command(sys.argv[1:] if argv is None else argv, parser)
    if misplaced:
        print(misplaced, file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.suites = suites
    interrupt.keep(KEPT.get(args.command, "no partial file was written"))
    try:
        with _warnings_in_one_line():
            result = args.func(args)
    except (ValueError, OSError, KeyboardInterrupt) as err:  # what the user can fix (files, folders, disk) or stop
        if args.debug:
            raise
        return _report(err, args)
    if args.json:
        print(json.dumps(result))
    return result.get("exit_status", 0)


@contextlib.contextmanager
def _warnings_in_one_line():
    """Warnings said in one line on stderr, as errors are, not in Python's format with a source file and line; the
    format is restored after (main also runs in-process: tests, whose warnings pytest records unformatted)."""
    before = warnings.formatwarning
    warnings.formatwarning = lambda message, *_, **__: f"mmspec: warning: {' '.join(str(message).split())}\n"
    try:
        yield
    finally:
        warnings.formatwarning = before


# what a Ctrl-C leaves, by command (others: nothing)
KEPT = {"render": "the manifest lists every complete file and a rerun renders only what is missing",
        "demo": "the demo stopped", "serve": "the service stopped",
        "train-head": "a rerun resumes from the last checkpoint"}


def _option_before_the_command(argv: list[str], parser: argparse.ArgumentParser) -> "str | None":
    """`mmspec --model DIR generate ...` said `invalid choice: 'DIR'`: the line that says where the option goes."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = next((a for a in argv if a in commands), None)
    if not argv or not argv[0].startswith("-") or argv[0] in ("-h", "--help") or command is None:
        return None
    return (f"mmspec: error: {argv[0]} goes after the command: mmspec {command} {argv[0]} ... (`mmspec {command} "
            "--help` lists its options)")


def _report(err: BaseException, args) -> int:
    """One line on stderr for an error the user can fix (exit 2) or a Ctrl-C (exit 130, as a shell reports SIGINT;
    also for an error after it: a Ctrl-C stops the child processes too, ffmpeg's included) -> the exit status."""
    if isinstance(err, KeyboardInterrupt) or interrupt.received():
        return interrupt.report()
    text = str(err) if isinstance(err, ValueError) or not err.strerror else \
        f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    print(f"mmspec: error: {' '.join(text.split())} (--debug shows the traceback)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # python -m mmspec.cli; the `mmspec` command is mmspec.__main__, which also sees start-up
    interrupt.install()
    sys.exit(main())
