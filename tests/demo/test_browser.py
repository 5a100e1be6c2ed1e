"""The demo in a real browser: headless Debian chromium driven by playwright (no browser download).

MMSPEC_DEMO_SCREENSHOT=docs/demo.png runs it on the bundled models and also writes the screenshot
there (how the README's picture is made).
"""
import io
import os
from pathlib import Path
from urllib.parse import urlparse

import pytest
from PIL import Image

CHROMIUM = "/usr/bin/chromium"
LOADED = "(css) => [...document.querySelectorAll(css)].every(img => img.complete && img.naturalWidth > 0)"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture
def page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e '.[dev]'")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no browser at {CHROMIUM}: apt-get install chromium")
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        except Exception as err:  # a browser that cannot start is reported, not failed on
            pytest.skip(f"chromium did not start: {str(err).splitlines()[0]}")
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        # offline: only the app itself may be reached
        page.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).hostname == "127.0.0.1"
                   else route.abort())
        yield page
        browser.close()


@pytest.fixture
def url(request, serve):
    if not os.environ.get("MMSPEC_DEMO_SCREENSHOT"):
        yield request.getfixturevalue("demo_url")
        return
    with serve() as url:  # the bundled models, for the README's screenshot
        yield url


def test_generate_shows_image_stats_and_commit_map_and_exact_matches_ar(page, url, tmp_path):
    page.goto(url)
    stats = page.locator("#image-stats")
    stats.get_by_text("red heart").wait_for(timeout=120_000)  # the image generated on page load
    page.locator("#image-prompt textarea").fill("smiling face")
    page.locator("#image-generate").click()
    stats.get_by_text("smiling face").wait_for(timeout=120_000)  # shown with the picture; the commit map follows
    assert "mean_acceptance_length" in stats.inner_text() and "tokens_per_second" in stats.inner_text()
    page.locator("#image-commit-map img").wait_for()
    page.locator("#image-histogram img").wait_for()
    assert page.locator("#image-output img").count() >= 1
    page.wait_for_function(LOADED, arg="#image-output img")
    method = page.locator("#image-method input")
    method.fill("exact")
    method.press("Enter")
    page.locator("#image-compare").click()
    page.get_by_text("identical to AR's, token for token").wait_for(timeout=300_000)
    page.wait_for_function(LOADED, arg="img")
    shot = page.screenshot(path=tmp_path / "demo.png", full_page=True)
    assert len(shot) > 10_000
    if os.environ.get("MMSPEC_DEMO_SCREENSHOT"):  # 256 colours: small enough to commit
        Image.open(io.BytesIO(shot)).quantize(256).save(os.environ["MMSPEC_DEMO_SCREENSHOT"], optimize=True)


def test_pictures_are_uploaded_to_the_video_and_image_tabs(page, url, tmp_path):
    """A first frame for a video; a mask without its picture is refused, then a keep-everything mask on a
    picture gives that picture in every output."""
    frame, mask = tmp_path / "frame.png", tmp_path / "mask.png"
    Image.new("RGB", (32, 32), (220, 40, 40)).save(frame)
    Image.new("L", (64, 64)).save(mask)  # black: keep every token (a multiple of the tiny and bundled grids)
    page.goto(url)
    page.locator("#image-stats").get_by_text("red heart").wait_for(timeout=120_000)  # the page load's run
    page.locator("#image-inpainting").get_by_text("Inpainting").click()
    page.locator("#image-mask input[type=file]").set_input_files(mask)
    page.locator("#image-mask img").wait_for()
    page.locator("#image-generate").click()
    page.get_by_text("A mask needs the image to inpaint").wait_for(timeout=60_000)
    page.locator("#image-image input[type=file]").set_input_files(frame)
    page.locator("#image-image img").wait_for()
    page.locator("#image-prompt textarea").fill("smiling face")
    page.locator("#image-generate").click()
    page.locator("#image-stats").get_by_text("smiling face").wait_for(timeout=120_000)
    page.wait_for_function(LOADED, arg="#image-output img")
    sources = [img.get_attribute("src") for img in page.locator("#image-output img").all()]
    shown = {page.request.get(src).body() for src in sources}
    assert len(sources) == 4 and len(shown) == 1  # four seeds, nothing regenerated: the same picture

    page.get_by_role("tab", name="Video").click()
    page.locator("#video-first-frame").get_by_text("First frame").first.click()
    page.locator("#video-image input[type=file]").set_input_files(frame)
    page.locator("#video-image img").wait_for()
    page.locator("#video-generate").click()
    page.locator("#video-stats").get_by_text("bounce red apple").wait_for(timeout=300_000)
    page.wait_for_function(LOADED, arg="#video-frames img")
