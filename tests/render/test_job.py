import json

import pytest

from mmspec.cli import main
from mmspec.render import JobError, load_job
from mmspec.render.naming import file_name


def test_the_issue_form_seeds_num_overrides_and_defaults(models, write_job):
    job = load_job(write_job({
        "kind": "image", "model": str(models / "image"), "batch_size": 8,
        "defaults": {"method": "coupled", "window": 16, "sampling": {"temperature": 0.6, "top_k": 20, "cfg_scale": 4.0}},
        "items": [{"prompt": "red heart", "seeds": [0, 1, 2, 3]}, {"prompt": "smiling face", "num": 4},
                  {"prompt": "rocket", "seeds": [7], "method": "exact", "sampling": {"top_k": 5}},
                  {"prompt": "red heart", "seeds": [4], "method": {"name": "coupled"}}]}))
    assert [(o.prompt, o.seed) for o in job.outputs] == [("red heart", s) for s in range(4)] + \
        [("smiling face", s) for s in range(4)] + [("rocket", 7), ("red heart", 4)]
    rocket = job.outputs[-2].settings
    assert rocket == {"method": "exact", "window": 16, "sampling": {"temperature": 0.6, "top_k": 5, "cfg_scale": 4.0}}
    assert len({o.group for o in job.outputs}) == 2 and job.batch_size == 8
    assert load_job(write_job({"kind": "image", "items": [{"prompt": "x", "method": "ar"}]})).outputs[0].settings == \
        {"method": "ar", "window": 1, "sampling": {}}  # ar's window is 1 whatever is asked; null model = bundled
    assert load_job(write_job({"kind": "text", "defaults": {"window": "auto", "method": "exact"},
                               "items": [{"prompt": "x"}]})).outputs[0].settings["window"] == "auto"


def test_an_output_asked_for_twice_is_refused_in_one_line_naming_both_items(models, write_job, capsys):
    items = [{"prompt": "red heart", "seeds": [0, 1]}, {"prompt": "apple"}, {"prompt": "red heart", "num_outputs": 2}]
    job = write_job({"kind": "image", "model": str(models / "image"), "items": items})
    with pytest.raises(JobError, match=r"items\[2\]\.seed 0: .*items\[0\] asks for this output already \(the same "
                                       r"prompt 'red heart', seed and settings give the same output\)"):
        load_job(job)
    assert main(["render", str(job), "--out", str(job.parent / "out")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    items[2]["method"] = "coupled"  # other settings: other outputs
    assert len(load_job(write_job({"kind": "image", "model": str(models / "image"), "items": items})).outputs) == 5


def test_items_file_is_read_beside_the_job(models, write_job, tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "red heart", "num": 2}\n\n{"prompt": "apple", "window": 3}\n')
    job = load_job(write_job({"kind": "video", "model": str(models / "video"), "defaults": {"seeds": [5]},
                              "items_file": "prompts.jsonl"}), batch_size=3)
    assert [(o.prompt, o.seed, o.settings["window"]) for o in job.outputs] == \
        [("red heart", 0, "auto"), ("red heart", 1, "auto"), ("apple", 5, 3)]
    assert job.batch_size == 3 and all(o.file.endswith(".gif") for o in job.outputs)


def test_names_depend_on_content_only(models, write_job):
    base = {"kind": "image", "model": str(models / "image"), "items": [{"prompt": "red heart", "seeds": [0, 1]}]}
    a, b = load_job(write_job(base), batch_size=1), load_job(write_job({**base, "batch_size": 32}))
    assert [o.file for o in a.outputs] == [o.file for o in b.outputs]
    assert a.outputs[0].file.startswith("red-heart-s0-") and a.outputs[0].id != a.outputs[1].id
    other = load_job(write_job({**base, "defaults": {"window": 8}}))
    assert not {o.id for o in other.outputs} & {o.id for o in a.outputs}


@pytest.mark.parametrize("prompt", ["../../etc/passwd", "/abs", "a\\b", "..", ".", "", "x" * 10_000, "\x00\n\x1b[31m",
                                    "\u202egnp.exe", "日本語"])
def test_hostile_prompts_make_plain_short_names(prompt):
    name = file_name(prompt, 3, "0123456789abcdef0123", "image")
    assert name.endswith("-s3-0123456789abcdef0123.png") and "/" not in name and "\\" not in name
    assert name.isprintable() and name.isascii() and not name.startswith(".") and len(name) <= 80


BAD = [
    ("kind: picture\nitems: [{prompt: x}]\n", "kind: must be one of"),
    ("kind: image\ncolour: red\nitems: [{prompt: x}]\n", "job.yaml: colour: unknown key"),
    ("kind: image\nitems: [{prompt: x}]\nitems_file: p.jsonl\n", "exactly one of items"),
    ("kind: image\nitems: []\n", "items: must be a non-empty list"),
    ("kind: image\nitems:\n  - {prompt: x}\n  - {prompt: y, windw: 4}\n", "line 4: items[1].windw: unknown key"),
    ("kind: image\nitems:\n  - {prompt: 3}\n", "items[0].prompt: must be a string"),
    ("kind: image\nitems:\n  - {prompt: \"  \"}\n", "items[0].prompt: empty; say what to generate"),
    ("kind: image\nitems:\n  - {prompt: x, window: 300}\n", "items[0].window: must be in [1, 256], got 300"),
    ("kind: image\nitems:\n  - {prompt: x, window: fast}\n", "items[0].window: must be an int in [1, 256] or one"),
    ("kind: image\nitems:\n  - {prompt: x, window: 0}\n", "items[0].window: must be in [1, 256], got 0"),
    ("kind: image\nitems:\n  - {prompt: x, window: true}\n", "items[0].window: must be an int"),
    ("kind: image\nitems:\n  - {prompt: x, method: ar, window: 999}\n", "items[0].window: must be in [1, 256], got 999"),
    ("kind: image\nitems:\n  - red heart\n", "job.yaml: items[0]: must be a mapping, got 'red heart'"),
    ("kind: image\ndefaults: {window: 4.5}\nitems: [{prompt: x}]\n", "defaults.window: must be an int"),
    ("kind: image\ndefaults: {method: fast}\nitems: [{prompt: x}]\n", "defaults.method: unknown method 'fast'"),
    ("kind: image\nitems: [{prompt: x, method: {name: coupled, init: sideways}}]\n", "items[0].method:"),
    ("kind: image\nitems: [{prompt: x, sampling: {temp: 1}}]\n", "items[0].sampling: unknown sampling options"),
    ("kind: image\nitems: [{prompt: x, sampling: {top_k: 0}}]\n", "items[0].sampling: top_k must be an int >= 1"),
    ("kind: image\nitems: [{prompt: x, sampling: {cfg_scale: .nan}}]\n", "items[0].sampling: cfg_scale must be a finite number"),
    ("kind: image\nitems: [{prompt: x, sampling: {temperature: hot}}]\n", "items[0].sampling:"),
    ("kind: image\nitems: [{prompt: x, sampling: 0.5}]\n", "items[0].sampling: must be a mapping"),
    ("kind: image\nitems: [{prompt: x, seeds: [1, 1]}]\n", "items[0].seeds: a seed is repeated"),
    ("kind: image\nitems: [{prompt: x, seeds: [-1]}]\n", "items[0].seeds[0]: must be an int"),
    ("kind: image\nitems: [{prompt: x, seeds: 3}]\n", "items[0].seeds: must be a non-empty list"),
    ("kind: image\nitems: [{prompt: x, seeds: [1], num: 2}]\n", "seeds, num: give one of them"),
    ("kind: image\ndefaults: {num: 0}\nitems: [{prompt: x}]\n", "defaults.num: must be an int >= 1"),
    ("kind: image\nbatch_size: 0\nitems: [{prompt: x}]\n", "batch_size: must be an int >= 1"),
    ("kind: image\nmodel: nowhere\nitems: [{prompt: x}]\n", "model: no model folder"),
    ("kind: image\nitems: [{prompt: x, max_new_tokens: 5}]\n", "items[0].max_new_tokens: unknown key"),
    ("kind: image\nitems: [{prompt: x, method: draft-model}]\n", "method: draft-model needs a text job"),
    ("kind: image\nitems: [{prompt: x, method: {name: draft-model, proactive: [4, 2]}}]\n",
     "method: draft-model needs a text job"),
    ("kind: text\nitems: [{prompt: x, method: {name: draft-model, proactive: [1, 2]}}]\n",
     "proactive drafting needs width >= 2"),
    ("kind: text\nitems: [{prompt: x, method: {name: draft-model, tree: 3}}]\n", "bad options ['tree']"),
    ("kind: image\nitems: [{prompt: x, method: {name: exact, proactive: 4}}]\n", "proactive must be (width, depth)"),
    ("kind: text\nitems: [{prompt: x, sampling: {cfg_scale: 3}}]\n", "text models have no null condition"),
    ("kind: text\nitems: [{prompt: x, stop_strings: ''}]\n", "stop_strings: must be a list"),
    ("kind: image\nkind: video\nitems: [{prompt: x}]\n", "duplicate key 'kind'"),
    ("kind: image\nitems: [{prompt: x\n", "not valid YAML"),
    ("- just a list\n", "a job is a mapping"),
    ("kind: image\nitems_file: p.jsonl\n", "items_file: no file 'p.jsonl'"),
]


@pytest.mark.parametrize("text, message", BAD)
def test_malformed_jobs_name_the_line_or_key(text, message, tmp_path):
    (tmp_path / "job.yaml").write_text(text)
    with pytest.raises(JobError) as err:
        load_job(tmp_path / "job.yaml")
    assert message in str(err.value)


def test_malformed_items_file_line_and_exit_status_2(tmp_path, capsys):
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "x"}) + "\n" + json.dumps({"prompt": "y", "num": -2}) + "\n")
    (tmp_path / "job.yaml").write_text("kind: image\nitems_file: p.jsonl\n")
    assert main(["render", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "out")]) == 2
    assert "p.jsonl line 2: num: must be an int >= 1, got -2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing is created for a malformed job
    (tmp_path / "p.jsonl").write_text('{"prompt": "x"}\n')
    assert main(["render", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "out"), "--batch-size", "0"]) == 2
    assert "--batch-size: must be an int >= 1, got 0" in capsys.readouterr().err
    (tmp_path / "p.jsonl").write_text('{"prompt": "x"}\n{"prompt": \n')
    assert main(["render", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "out")]) == 2
    assert "p.jsonl line 2: not JSON" in capsys.readouterr().err


def test_compile_is_a_job_setting_that_names_no_output(models, write_job):
    base = {"kind": "image", "model": str(models / "image"), "items": [{"prompt": "red heart", "seeds": [0, 1]}]}
    plain, compiled = load_job(write_job(base)), load_job(write_job({**base, "compile": True}))
    assert compiled.compile and not plain.compile
    assert [o.file for o in plain.outputs] == [o.file for o in compiled.outputs]  # the same tokens, the same files
    with pytest.raises(JobError, match="compile: must be true or false"):
        load_job(write_job({**base, "compile": "yes"}))


def test_eagle_needs_the_model_folders_head_or_names_a_head_folder_beside_the_job(models, tiny_heads, write_job,
                                                                                   tmp_path):
    import shutil

    base = {"kind": "image", "model": str(models / "image"), "items": [{"prompt": "red heart", "method": "eagle"}]}
    with pytest.raises(JobError) as err:
        load_job(write_job(base))
    assert f"items[0].method: method eagle needs a draft head and {models / 'image'} has no head/" in str(err.value)
    assert "mmspec train-head" in str(err.value)
    named = {**base, "items": [{"prompt": "red heart", "method": {"name": "eagle", "head": "heads/image"}}]}
    with pytest.raises(JobError, match="items\\[0\\].method: EAGLE-3 head: no folder at"):
        load_job(write_job(named))
    shutil.copytree(tiny_heads / "image" / "head", tmp_path / "heads" / "image")  # beside the job file
    (output,) = load_job(write_job(named)).outputs
    assert output.settings["method"]["head"] == str(tmp_path / "heads" / "image")
    (own,) = load_job(write_job({**base, "model": str(tiny_heads / "image")})).outputs
    assert own.settings["method"] == "eagle"


def test_num_outputs_is_the_seed_count_and_num_its_old_name(models, write_job):
    job = {"kind": "image", "model": str(models / "image"), "items": [{"prompt": "red heart", "num_outputs": 2}]}
    assert [o.seed for o in load_job(write_job(job)).outputs] == [0, 1]
    old = {**job, "items": [{"prompt": "red heart", "num": 2}]}
    with pytest.warns(DeprecationWarning, match="num is the old name of num_outputs"):
        assert [o.seed for o in load_job(write_job(old)).outputs] == [0, 1]
    both = {**job, "items": [{"prompt": "red heart", "num": 2, "num_outputs": 2}]}
    with pytest.raises(JobError, match="num_outputs, num: give one of them, not both"):
        load_job(write_job(both))
