"""mmspec command line: generate images / videos / text, benchmark methods, convert checkpoints."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from mmspec.methods import METHODS, resolve_method
from mmspec.sampling import Sampling
from mmspec.pipelines.base import DEFAULT_METHOD, DEFAULT_WINDOW
from mmspec.window import MAX_WINDOW

KINDS = ("image", "video", "text")


def _pipeline(args):
    """The pipeline for args.kind; fills in its default window when --window is not given."""
    from mmspec.pipelines import ImagePipeline, TextPipeline, VideoPipeline

    if args.kind == "text":
        pipe = TextPipeline.from_pretrained(args.model, draft=args.draft)
    else:
        pipe = {"image": ImagePipeline, "video": VideoPipeline}[args.kind].from_pretrained(args.model)
    return pipe


def _method(args):
    return args.method if args.init is None else {"name": args.method, "init": args.init}


def _given_sampling(args) -> dict:
    return {k: v for k, v in {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                              "cfg_scale": args.cfg_scale}.items() if v is not None}


def _sampling(args, pipeline) -> dict | None:
    given = _given_sampling(args)
    if not given:
        return None
    return {**pipeline.default_sampling, **given}


def _window_arg(text: str) -> "int | str":
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int in [1, {MAX_WINDOW}] or 'auto', got {text!r}") from None


def _check_options(args) -> None:
    """Everything that can be checked without a model, checked before any model loads."""
    if isinstance(args.window, int) and not 1 <= args.window <= MAX_WINDOW:
        raise ValueError(f"--window must be in [1, {MAX_WINDOW}], got {args.window}")
    if args.num < 1:
        raise ValueError(f"--num must be >= 1, got {args.num}")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.method == "draft-model" and args.kind != "text":
        raise ValueError("--method draft-model needs a draft model, which only text has (--draft DIR)")
    if args.method != "draft-model":
        resolve_method(_method(args))  # unknown --init policies
    for name in ("image", "mask"):
        path = getattr(args, name, None)
        if path is not None and not Path(path).is_file():
            raise ValueError(f"--{name}: no file at {path}")
    if getattr(args, "image", None) is not None and args.kind == "text":
        raise ValueError("--image is for video (first frame) and image (inpainting with --mask), not text")
    Sampling(**_given_sampling(args))  # NaN, negative temperature, top-p outside (0, 1]...


def _check_writable(folder: "str | Path") -> Path:
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"cannot write to --out {folder}: {err.strerror or err}") from None
    return folder


def _common(p: argparse.ArgumentParser):
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--model", help="model folder (default: the bundled model for the kind)")
    p.add_argument("--draft", help="draft model folder for --method draft-model (text)")
    p.add_argument("--method", default=DEFAULT_METHOD, choices=sorted(METHODS),
                   help=f"default {DEFAULT_METHOD}: the same tokens as --method ar with the same seed")
    p.add_argument("--init", help="fill policy for fresh window slots: random, left, above, prev-frame, ngram")
    p.add_argument("--window", type=_window_arg, default=DEFAULT_WINDOW,
                   help="positions verified per forward (1..256), or 'auto' (the default: picked at every step from "
                        "measured step costs and acceptance, up to 16 image, 32 video, 6 text)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num", type=int, default=1, help="outputs per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64, help="text only")
    for name, typ in (("temperature", float), ("top-k", int), ("top-p", float), ("cfg-scale", float)):
        p.add_argument(f"--{name}", type=typ, help="override the model's default sampling")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def cmd_generate(args) -> dict:
    _check_options(args)
    out_dir = _check_writable(args.out)
    pipe = _pipeline(args)
    call = dict(num_outputs=args.num, seed=args.seed, window=args.window, sampling=_sampling(args, pipe),
                progress_bar=not args.json)
    if args.kind == "text":
        call["max_new_tokens"] = args.max_new_tokens
    if args.image is not None:
        call["image"] = args.image
    if args.mask is not None:
        call["mask"] = args.mask
    if args.compare:
        from mmspec.bench import compare, format_comparison

        comparison = compare(pipe, args.prompt, _method(args), **call)
        out = comparison.pop("output")
    else:
        out = pipe(args.prompt, method=_method(args), **call)
    paths = [str(p) for p in out.save(out_dir)]
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
    from mmspec.bench import environment, format_table, run_benchmark

    _check_options(args)
    methods = _bench_methods(args)
    if args.out:
        _check_writable(Path(args.out).parent)
    pipe = _pipeline(args)
    prompts = args.prompt or {"image": ["red heart", "pizza", "rocket", "dog face"],
                              "video": ["bounce red apple", "slide right car", "zoom in red heart", "rotate sun"],
                              "text": ["def fibonacci(n):\n", "import os\n\n\ndef ", "class Stack:\n    def "]}[args.kind]
    call = dict(num_outputs=args.num, seed=args.seed, window=args.window, sampling=_sampling(args, pipe))
    if args.kind == "text":
        call["max_new_tokens"] = args.max_new_tokens
    rows = run_benchmark(pipe, prompts, methods, repeats=args.repeats, **call)
    result = {"kind": args.kind, "prompts": prompts, "window": args.window, "num": args.num,
              "environment": environment(), "results": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.json:
        print(format_table(rows))
    return result


def _bench_methods(args) -> list[str]:
    methods = [m.strip() for m in args.methods.split(",")]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown --methods {unknown}; choose from {sorted(METHODS)}")
    if "draft-model" in methods and args.kind != "text":
        raise ValueError("draft-model benchmarks need a draft model: text only from the CLI")
    return methods


def cmd_convert(args) -> dict:
    from mmspec.reference.checkpoint import convert_llamagen

    out = convert_llamagen(args.checkpoint, args.out, allow_pickle=args.allow_pickle, model=args.model,
                           image_size=args.image_size, model_type=args.type, num_classes=args.num_classes,
                           cls_token_num=args.cls_token_num, vocab_size=args.vocab_size)
    print(out)
    return {"out": str(out)}


def cmd_demo(args) -> dict:
    try:
        from mmspec.demo import build_app, launch
    except ImportError as err:
        print(f'mmspec demo needs {err.name}: pip install -e ".[demo]"', file=sys.stderr)
        raise SystemExit(2)

    app = build_app(args.image_model, args.video_model, args.text_model, args.text_draft, args.concurrency)
    launch(app, args.host, args.port)
    return {}


def cmd_render(args) -> dict:
    from mmspec.render import render_job

    summary = render_job(args.job, args.out, backend=args.backend, ray_address=args.ray_address,
                         batch_size=args.batch_size)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return {**summary, "exit_status": 1 if summary["failed"] else 0}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate images, videos or text with speculation")
    _common(gen)
    gen.add_argument("prompt")
    gen.add_argument("--out", default="out", help="output folder")
    gen.add_argument("--image", help="video: the first frame (image-to-video); image: the picture to inpaint")
    gen.add_argument("--mask", help="image: inpainting mask, nonzero where to regenerate")
    gen.add_argument("--compare", action="store_true",
                     help="also run plain AR (--method ar) with the same prompt, seed and sampling: forwards, "
                          "seconds and the speed-up, and for --method exact whether the tokens are identical")
    gen.set_defaults(func=cmd_generate)
    bench = sub.add_parser("bench", help="NFE, acceptance and wall-clock of methods against AR, same run")
    _common(bench)
    bench.add_argument("--methods", default="jacobi,coupled,gumbel,exact,lookup")
    bench.add_argument("--prompt", action="append", help="a prompt (repeatable); default: a fixed set")
    bench.add_argument("--repeats", type=int, default=1, help="time each method this many times, keep the best")
    bench.add_argument("--out", help="write the JSON results here")
    bench.set_defaults(func=cmd_bench)
    render = sub.add_parser("render", help="render a job file into a folder: resumable, exactly once per output")
    render.add_argument("job", help="job file (YAML; see configs/)")
    render.add_argument("--out", required=True, help="output folder (files + manifest.jsonl)")
    render.add_argument("--backend", default="local", choices=["local", "ray"])
    render.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
    render.add_argument("--batch-size", type=int, help="rows per engine call (default: the job's)")
    render.set_defaults(func=cmd_render, json=False)
    conv = sub.add_parser("convert", help="convert a LlamaGen GPT checkpoint to a reference GPT folder")
    conv.add_argument("family", choices=["llamagen"])
    conv.add_argument("checkpoint")
    conv.add_argument("out")
    conv.add_argument("--model", default="GPT-B")
    conv.add_argument("--type", default="c2i", choices=["c2i", "t2i"])
    conv.add_argument("--image-size", type=int, default=256)
    conv.add_argument("--num-classes", type=int, default=1000)
    conv.add_argument("--cls-token-num", type=int, default=120)
    conv.add_argument("--vocab-size", type=int, default=16384)
    conv.add_argument("--allow-pickle", action="store_true", help="read a .pt with torch's weights-only unpickler")
    conv.set_defaults(func=cmd_convert, json=False)
    demo = sub.add_parser("demo", help="the Gradio demo on the bundled models (needs the demo extra)")
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: reachable from other machines)")
    demo.add_argument("--port", type=int, help="port (default: the first free one from 7860)")
    for kind in KINDS:
        demo.add_argument(f"--{kind}-model", help=f"{kind} model folder (default: the bundled one)")
    demo.add_argument("--text-draft", help="draft model folder for --text-model (draft-model method)")
    demo.add_argument("--concurrency", type=int, default=1, help="generations at a time per model")
    demo.set_defaults(func=cmd_demo, json=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"mmspec: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    return result.get("exit_status", 0)


if __name__ == "__main__":
    sys.exit(main())
