"""The Gradio app: one tab per pipeline (image, video, text), built once with its model loaded.

Each tab has two events: generate (streams the output as it is committed, then stats, commit map
and accepted-length histogram) and compare (the chosen method against plain AR, same prompt, seed
and sampling). Events of a tab share one queue, so a model runs `concurrency` visitors' generations at a time, and
their rows run as rows of one decode of `slots` rows (mmspec.engine): a visitor's images start as soon as a row
frees, beside the others', and are the ones they would be alone.
The video tab takes an optional first frame, the image tab an optional picture and mask to inpaint:
the pipelines' image= and mask=.
"""
from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Iterator

import gradio as gr

from mmspec.bench import compare
from mmspec.demo.render import commit_map, length_histogram
from mmspec.demo.report import comparison, run_stats, verdict
from mmspec.demo.stream import Snapshot, stream
from mmspec.demo.views import GridView, TextView, as_files
from mmspec.memory import DoesNotFit
from mmspec.methods import DEFAULT_METHOD, method_names
from mmspec.options import CONCURRENCY, SLOTS
from mmspec.window import MAX_WINDOW, WINDOWS
from mmspec.families import check
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.grid import prompt_notes, token_mask

MAX_OUTPUTS = 8  # a screen's worth; what memory holds is estimated per call (Tab.settings)
EXAMPLES = {"image": ["red heart", "smiling face", "pizza", "rocket"],
            "video": ["bounce red apple", "slide right racing car", "zoom in red heart", "rotate sun"],
            "text": ["def fibonacci(n):\n", "class Stack:\n    def "]}
DEFAULT_OUTPUTS = {"image": 4, "video": 1, "text": 1}
OUTPUT_LABELS = {"image": "Output (grey: not committed yet)", "video": "Videos (GIF)",
                 "text": "Output (streamed as committed)"}
INTRO = """# mmspec: lossless speculative decoding
Each forward pass of the model verifies a *window* of drafted tokens and commits the accepted run at
once. The commit map colours every token by the forward that committed it: one colour over many tokens
is a run accepted in a single forward. `exact` gives the very same tokens as plain AR with the same seed.
*Compare with plain AR* times both runs without the live preview, so their times are comparable."""


def build_app(image_model=None, video_model=None, text_model=None, text_draft=None,
              concurrency: int = CONCURRENCY, img_size: "int | None" = None, slots: int = SLOTS) -> gr.Blocks:
    """Model folders default to the bundled models; text_draft is the text model's draft model (the bundled text
    model comes with its own), for the methods that need one. `concurrency`: generations at a time per model;
    `slots`: rows decoded at once per model (as many as fit in memory, when fewer). img_size: a Janus image model's
    side in pixels (deepseek's)."""
    if concurrency < 1 or slots < 1:
        raise ValueError(f"concurrency and slots must be >= 1, got {concurrency} and {slots}")
    folders = {"image": image_model, "video": video_model, "text": text_model}
    options = {"image": {"img_size": img_size}, "video": {}, "text": {"draft": text_draft}}  # each kind's own
    for kind, folder in folders.items():  # what a family refuses, in one line before any model loads
        check(folder, kind, "demo", **options[kind])
    pipes = {kind: load_pipeline(kind, folder, door="demo", **options[kind]) for kind, folder in folders.items()}
    for pipe in pipes.values():
        pipe.share_engines(slots)
    # the runs' files (gradio serves copies); the tabs hold it, it is removed at exit
    files = tempfile.TemporaryDirectory(prefix="mmspec-demo-")
    with gr.Blocks(title="mmspec demo", delete_cache=(3600, 3600)) as app:
        gr.Markdown(INTRO)
        with gr.Tabs():
            tabs = {}
            for kind, pipe in pipes.items():
                with gr.Tab(kind.capitalize(), id=kind):
                    tabs[kind] = Tab(kind, pipe, files, concurrency)
        tabs["image"].generate_on(app.load)  # the page opens on a freshly generated image
    return app


def launch(app: gr.Blocks, host: str = "127.0.0.1", port: "int | None" = None, block: bool = True) -> str:
    """Serves the app and prints its URL; block=False returns at once (close with app.close())."""
    try:
        app.launch(server_name=host, server_port=port, prevent_thread_lock=True, show_error=True, quiet=True)
    except OSError as err:  # the port is taken: a usage error, not a crash
        raise ValueError(f"cannot serve on {host}:{port}: {err}") from err
    print(f"mmspec demo running on {app.local_url}", flush=True)
    if block:  # (not gradio's block_thread, which takes Ctrl-C for a normal end: the command exits 130 on it)
        try:
            while app.is_running:
                time.sleep(0.1)
        finally:
            app.close()
    return app.local_url


class Tab:
    """One pipeline's tab: its controls, its outputs, and the generate and compare events."""

    def __init__(self, kind: str, pipe, files: tempfile.TemporaryDirectory, concurrency: int):
        self.kind, self.pipe, self.files = kind, pipe, files
        self.view = TextView(pipe) if kind == "text" else GridView(pipe)
        with gr.Row():
            with gr.Column(scale=1, min_width=280):
                controls = self._controls()
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id=f"{kind}-generate")
                    cmp_btn = gr.Button("Compare with plain AR", elem_id=f"{kind}-compare")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id=f"{kind}-stop")
            with gr.Column(scale=2):
                self._outputs()
        self.shared = dict(inputs_kwargs=controls, concurrency_limit=concurrency, concurrency_id=kind)
        self.outputs = [c for c in (self.media, self.frames, self.video, self.runs, self.stats, self.cmap, self.hist)
                        if c is not None]
        runs = [self.generate_on(run_btn.click, api_name=f"{kind}_generate"),
                cmp_btn.click(self.compare, outputs=[self.media_a, self.media_b, self.comparison, self.verdict],
                              api_name=f"{kind}_compare", show_progress_on=self.comparison, **self.shared)]
        stop_btn.click(None, cancels=runs, api_visibility="private")

    def generate_on(self, trigger, api_name: "str | None" = None):
        """Runs `generate` on an event (a click, the page load); the progress bar goes on the stats,
        not over the output that fills in."""
        return trigger(self.generate, outputs=self.outputs, api_name=api_name, show_progress_on=self.stats,
                       api_visibility="public" if api_name else "private", **self.shared)

    def _controls(self) -> dict:
        """The inputs, by the name of the handler argument they fill."""
        kind, pipe = self.kind, self.pipe
        methods = method_names(has_draft_model=pipe.draft_model is not None, has_head=pipe.has_head)
        sampling = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, **pipe.default_sampling}
        c = {"prompt": gr.Textbox(EXAMPLES[kind][0], label="Prompt", lines=3 if kind == "text" else 1,
                                  elem_id=f"{kind}-prompt")}
        gr.Examples([[p] for p in EXAMPLES[kind]], [c["prompt"]])
        c["method"] = gr.Dropdown(methods, value=DEFAULT_METHOD, label="Method", elem_id=f"{kind}-method")
        # the pictures the model's family takes (mmspec.families); last in the API: positional callers
        pictures = self._picture_inputs() if {"video": "image", "image": "mask"}.get(kind) in pipe.family.inputs else {}
        c["window"] = gr.Slider(0, MAX_WINDOW, 0, step=1, label="Window",
                                info=f"positions verified per forward; 0: auto ({WINDOWS['auto'].help})")
        with gr.Row():
            c["seed"] = gr.Number(0, precision=0, minimum=0, label="Seed")
            c["num_outputs"] = gr.Slider(1, MAX_OUTPUTS, DEFAULT_OUTPUTS[kind], step=1, label="Outputs")
        if kind == "text":  # text models have no null condition, so no CFG
            c["max_new_tokens"] = gr.Slider(1, self.view.context, 64, step=1, label="Max new tokens")
        with gr.Accordion("Sampling (defaults: the model's)", open=False):
            c["temperature"] = gr.Slider(0, 2, sampling["temperature"], step=0.05, label="Temperature",
                                         info="0: greedy")
            c["top_k"] = gr.Slider(0, pipe.target.vocab_size, sampling["top_k"] or 0, step=1, label="Top-k",
                                   info="0: off")
            c["top_p"] = gr.Slider(0.01, 1, sampling["top_p"] or 1.0, step=0.01, label="Top-p", info="1: off")
            if kind != "text":
                c["cfg_scale"] = gr.Slider(1, 10, sampling.get("cfg_scale", 1.0), step=0.1, label="CFG scale",
                                           info="1: off")
        return {**c, **pictures}

    def _picture_inputs(self) -> dict:
        """Optional pictures the pipeline starts from; empty, the tab generates from the prompt alone."""
        if self.kind == "video":
            with gr.Accordion("First frame (optional; empty: drawn from the prompt)", open=False,
                              elem_id="video-first-frame"):
                return {"image": gr.Image(type="pil", label="First frame", sources=["upload", "clipboard"],
                                          height=160, elem_id="video-image")}
        h, w, down = self.pipe.layout.h, self.pipe.layout.w, self.pipe.tokenizer.downsample
        with gr.Accordion("Inpainting (optional)", open=False, elem_id="image-inpainting"):
            with gr.Row():
                return {"image": gr.Image(type="pil", label="Image to inpaint", sources=["upload", "clipboard"],
                                          height=160, elem_id="image-image"),
                        "mask": gr.Image(type="pil", image_mode="L", sources=["upload", "clipboard"], height=160,
                                         label=f"Mask: white = redraw ({w * down}x{h * down})", elem_id="image-mask")}

    def _outputs(self):
        kind = self.kind  # elem_ids: for tests and custom CSS
        self.media = _media(kind, OUTPUT_LABELS[kind], columns=4, elem_id=f"{kind}-output")
        self.frames, self.video = None, None
        if kind == "video":  # frames fill in one picture; the finished videos come as GIFs and an MP4
            self.frames = gr.Image(label="Frames (grey: not committed yet)", type="pil", format="png",
                                   elem_id="video-frames")
            self.video = gr.Video(label="First output (MP4)", autoplay=True, loop=True, height=200)
        self.runs = None
        if kind == "text":
            self.runs = gr.HighlightedText(label="First output by forward: the tokens each forward committed",
                                           show_legend=True, show_inline_category=False, elem_id="text-runs")
        self.live = self.frames or self.media  # what the partial outputs go to
        with gr.Row():
            self.cmap = gr.Image(label="Commit map", type="pil", format="png", elem_id=f"{kind}-commit-map",
                                 scale=3)
            with gr.Column(scale=2):
                self.stats = gr.JSON(label="Stats", open=True, elem_id=f"{kind}-stats")
                self.hist = gr.Image(label="Accepted length per forward", type="pil", format="png",
                                     elem_id=f"{kind}-histogram")
        with gr.Accordion("Compare with plain AR", open=True):
            self.verdict = gr.Markdown("Press *Compare with plain AR* to run `ar` with the same prompt, seed and "
                                       "sampling.", elem_id=f"{kind}-verdict")
            with gr.Row():
                self.media_a, self.media_b = _media(kind, "Method", columns=2), _media(kind, "Plain AR", columns=2)
            self.comparison = gr.JSON(label="Comparison", open=True)

    def settings(self, prompt: str, seed, method: str, window, num_outputs, temperature, top_k, top_p,
                 cfg_scale=None, max_new_tokens=None, image=None, mask=None) -> dict:
        """The pipeline call; a message for what the components' own bounds cannot check (an output that does not fit
        in the memory free now included)."""
        if not prompt.strip():
            raise _refusal("Enter a prompt.")
        pictures = self._pictures(image, mask)
        for note in prompt_notes(self.pipe, prompt, first_frame_given=image is not None):
            gr.Warning(note)  # (as the command line's one line: a prompt naming no subject is drawn all the same)
        sampling = {"temperature": temperature, "top_k": int(top_k) or None, "top_p": top_p if top_p < 1 else None}
        call = dict(prompt=prompt, seed=int(seed), method=method, window=int(window) or "auto", num_outputs=int(num_outputs),
                    sampling=sampling)
        if self.kind == "text":
            used, context = self.view.prompt_tokens(prompt), self.view.context
            if used + max_new_tokens > context:
                raise _refusal(f"The prompt ({used} tokens) plus {int(max_new_tokens)} new tokens exceed the "
                               f"model's context of {context} tokens.")
            call["max_new_tokens"] = int(max_new_tokens)
        else:
            sampling["cfg_scale"] = cfg_scale
        call.update(pictures)
        try:  # outputs that do not fit at once run in batches that do; one that does not fit is refused before any work
            self.pipe.check_rows([prompt], 1, **{k: v for k, v in call.items() if k != "prompt"})
        except DoesNotFit as err:
            raise _refusal(f"{err}.") from None
        return call

    def _pictures(self, image, mask) -> dict:
        """image= / mask= of the call, when given; refusals for what the pipeline would refuse."""
        if mask is not None and image is None:
            raise _refusal("A mask needs the image to inpaint: add the image, or clear the mask.")
        if image is not None and mask is None and self.kind == "image":
            raise _refusal("Inpainting needs a mask too: white where to regenerate, black where to keep the image.")
        if mask is not None:
            try:
                token_mask(mask, self.pipe.layout.h, self.pipe.layout.w)
            except ValueError as err:
                raise _refusal(f"Mask: {err}.") from None
        return {k: v for k, v in (("image", image), ("mask", mask)) if v is not None}

    def run(self, call: dict, progress, desc: str):
        """Yields Snapshots while the pipeline runs, then its output; progress over committed tokens."""
        total = call["num_outputs"] * (call["max_new_tokens"] if self.kind == "text" else self.pipe.layout.length)
        progress((0, total), desc=desc, unit="tokens")
        for item in stream(lambda hook: self.pipe(**call, on_commit=hook)):
            if isinstance(item, Snapshot):
                progress((item.committed, total), desc=desc, unit="tokens")
            yield item

    # image and mask are named, with None defaults, so that the API marks them optional: gradio_client
    # callers that predate them, and tabs without them, leave them out
    def generate(self, progress=gr.Progress(), image=None, mask=None, **values):
        """Streams partial outputs, then the media and stats, then the commit map and histogram (their plots cost
        ~0.1-0.2 s of CPU each: the picture is not kept waiting for them, nor for other visitors' plots)."""
        call = self.settings(image=image, mask=mask, **values)
        yield dict.fromkeys(self.outputs)  # no stale results beside the new run
        with self.folder() as folder:
            for item in self.run(call, progress, call["method"]):
                if isinstance(item, Snapshot):
                    yield {self.live: as_files(self.view.preview(item.tokens, call["prompt"]), folder)}
                else:
                    out = item
            shown, mp4 = self.view.media(out, folder)
            result = {self.media: as_files(shown, folder), self.stats: run_stats(out, call["method"])}
            if self.video is not None:
                result.update({self.frames: as_files(self.view.preview(out.tokens, call["prompt"]), folder),
                               self.video: mp4})
            if self.runs is not None:
                result[self.runs] = self.view.runs(out)
            yield result  # (the last yield holds every output again: an API caller gets the last one alone)
            plots = {self.cmap: commit_map(self.view.steps(out.stats.commit_step)),
                     self.hist: length_histogram(out.stats.commit_step)}
            yield {**result, **as_files(plots, folder)}

    def compare(self, progress=gr.Progress(), image=None, mask=None, **values):
        """The chosen method and plain AR, same prompt, seed and sampling; for exact, are the tokens equal?"""
        call = self.settings(image=image, mask=mask, **values)

        def run(method):
            *_, out = self.run({**call, "method": method}, progress, method)  # the last item is the output
            return out
        result = compare(run, call["method"])
        fast, ar = result["output"], result["ar_output"]
        report = comparison(call["method"], fast, ar, result["identical"] if call["method"] == "exact" else None)
        with self.folder() as folder:  # (a generator, so that the folder outlives gradio's copies)
            yield {self.media_a: as_files(self.view.media(fast, folder / "method")[0], folder),
                   self.media_b: as_files(self.view.media(ar, folder / "ar")[0], folder),
                   self.comparison: report, self.verdict: verdict(report)}

    @contextlib.contextmanager
    def folder(self) -> Iterator[Path]:
        """A run's files, removed when the run ends: gradio has copied each into its cache as it was yielded."""
        with tempfile.TemporaryDirectory(dir=self.files.name, ignore_cleanup_errors=True) as path:
            yield Path(path)


def _refusal(message: str) -> gr.Error:
    """Shown to the user; not a server error, so no traceback in the server's log."""
    return gr.Error(message, print_exception=False)


def _media(kind: str, label: str, columns: int, elem_id: "str | None" = None):
    """The output component of a kind: a gallery of images or GIFs, or monospaced text (code models)."""
    if kind == "text":
        return gr.Code(label=label, lines=12 if columns > 2 else 8, interactive=False, wrap_lines=True,
                       elem_id=elem_id)
    return gr.Gallery(label=label, columns=columns, fit_columns=False, allow_preview=False, format="png",
                      object_fit="contain", height=300 if columns > 2 else 240, elem_id=elem_id)
