"""The demo's door for each family's image folder (docs/usage.md's table): its image tab, served, generates the
pipeline's greedy image through gradio_client; the family's tab shows only the pictures its calls take."""
import pytest
from PIL import Image

from mmspec.demo.render import enlarge
from mmspec.pipelines import ImagePipeline
from tiny import tiny_chameleon_folder, tiny_emu3_folder, tiny_janus_folder, tiny_llamagen_folder

FOLDERS = {"chameleon": tiny_chameleon_folder, "janus": tiny_janus_folder, "emu3": tiny_emu3_folder,
           "llamagen": tiny_llamagen_folder}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-families")
    for name, build in FOLDERS.items():
        build(root / name)
    return root


@pytest.mark.parametrize("name", FOLDERS)
def test_the_image_tab_runs_the_familys_folder(serve, folders, tiny_models, tiny_text, name):
    from gradio_client import Client

    prompt = "3" if name == "llamagen" else "a red cat"  # (LlamaGen's class-to-image: a class label)
    pipe = ImagePipeline.from_pretrained(folders / name, window_cache="off")
    expected = pipe(prompt, method="exact", window=4, sampling={"temperature": 0}).images[0]
    with serve(image_model=folders / name, video_model=tiny_models / "video", text_model=tiny_text / "target") as url:
        client = Client(url, verbose=False)
        gallery, stats, _, _ = client.predict(prompt=prompt, method="exact", window=4, num_outputs=1, seed=0,
                                              temperature=0, top_k=0, top_p=1.0,
                                              cfg_scale=pipe.default_sampling["cfg_scale"], api_name="/image_generate")
        names = {p["parameter_name"] for p in client.view_api(print_info=False, return_format="dict")
                 ["named_endpoints"]["/image_generate"]["parameters"]}
    assert stats["outputs"] == 1 and "image" not in names and "mask" not in names
    shown = Image.open(gallery[0]["image"]).convert("RGB")
    assert shown.tobytes() == enlarge(expected, 256).convert("RGB").tobytes()
