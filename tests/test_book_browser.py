"""The built smoke book as a reader sees it: every page loaded in headless Chromium, offline.

A page fails on a console error or uncaught exception, a missing image (or a failed local request), an empty
figure (a figure element without an image, a blank image, matplotlib's ``<Figure size ... with 0 Axes>``), a
visible Python repr (``<... object at 0x``, ``Claim(``) or traceback, or a table wider than the page that does
not scroll. A screenshot of every page goes to ``runs/smoke/screenshots/``.

Chromium is Debian's (``.ci/install-browser``), driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``): no driver and no Python package beyond the standard library, nothing downloaded.
External requests are blocked (no network), and a page that asks for one fails: the book is read offline (MathJax
is served from the book's own ``_static/``, see ``book/_ext``). A page with math fails when MathJax typesets none of
it (the reader would see raw TeX).

Run after ``anonpaper reproduce --profile smoke``: ``pytest -m notebooks tests/test_book_browser.py``.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest

pytestmark = pytest.mark.notebooks
ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "runs" / "smoke" / "book" / "_build" / "html"
SCREENSHOTS = ROOT / "runs" / "smoke" / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync",
         # No network at all: every host name fails to resolve.
         "--host-resolver-rules=MAP * ~NOTFOUND", "--no-default-browser-check", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--remote-debugging-pipe"]
VIEWPORT = {"width": 1280, "height": 900}
VISIBLE_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>|\bClaim\(|Traceback \(most recent call last\)"
                          r"|<Figure size \d+x\d+ with \d+ Axes>")


def find_chromium() -> str | None:
    """``$ANONPAPER_CHROMIUM``, else Debian's ``chromium`` (or ``chromium-browser``) on PATH."""
    return os.environ.get("ANONPAPER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class DevToolsPipe:
    """A headless Chromium and its DevTools protocol over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out;
    messages are JSON terminated by a NUL byte)."""

    def __init__(self, executable: str, profile_dir: Path, log_path: Path):
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def child_setup():  # runs in the child between fork and exec: put the pipe ends on fds 3 and 4
            read_end = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
            os.closerange(5, 1024)

        self._log = open(log_path, "wb")
        self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile_dir}",
                                         f"--window-size={VIEWPORT['width']},{VIEWPORT['height']}", "about:blank"],
                                        stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                        close_fds=False, preexec_fn=child_setup)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the DevTools pipe (exit {self.process.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        """Send a command and return its result; events that arrive meanwhile are kept in ``events``."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 60.0) -> dict:
        """Wait for an event (first looking among those already received)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(index)
            self.events.append(self._read_message(deadline))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


# Runs in the page once it has loaded; returns what the checks need.
_PAGE_PROBE = """
(async () => {
  const body = document.body || document.documentElement;   // a redirect page may have no body yet
  const images = [...document.images];
  for (const image of images) { image.loading = 'eager'; }
  await Promise.all(images.map(image => image.complete ? null :
      new Promise(resolve => { image.onload = image.onerror = resolve; setTimeout(resolve, 5000); })));
  const visible = element => { const box = element.getBoundingClientRect();
                               return box.width > 0 && box.height > 0; };
  const pageRight = Math.min(document.documentElement.clientWidth,
      (document.querySelector('main, article, .bd-article') || body).getBoundingClientRect().right);
  const wide = [];
  for (const table of document.querySelectorAll('table')) {
    if (!visible(table)) continue;
    const box = table.getBoundingClientRect();
    let scroller = null;
    for (let node = table.parentElement; node && node !== body; node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if (overflow === 'auto' || overflow === 'scroll') { scroller = node; break; }
      if (overflow === 'hidden' || overflow === 'clip') break;   // cut, not scrolled
    }
    const fits = box.right <= pageRight + 1;
    const scrolls = scroller !== null && scroller.getBoundingClientRect().right <= pageRight + 1;
    if (!fits && !scrolls) {
      wide.push({width: Math.round(box.width), page: Math.round(pageRight),
                 head: (table.innerText || '').slice(0, 80)});
    }
  }
  // Math: Sphinx marks each formula with class "math"; MathJax replaces its TeX by an mjx-container.
  const formulas = document.querySelectorAll('.math').length;
  if (formulas && window.MathJax) {
    for (let waited = 0; waited < 10000 && !document.querySelector('mjx-container'); waited += 100) {
      await new Promise(resolve => setTimeout(resolve, 100));
    }
  }
  const emptyFigures = [...document.querySelectorAll('figure, div.figure')]
      .filter(figure => !figure.querySelector('img, svg, canvas, table, video'))
      .map(figure => figure.id || (figure.innerText || '').slice(0, 80));
  return {
    images: images.map(image => ({src: image.currentSrc || image.src, width: image.naturalWidth,
                                  loaded: image.complete && image.naturalWidth > 0})),
    wide: wide, emptyFigures: emptyFigures,
    formulas: formulas, typeset: document.querySelectorAll('mjx-container').length,
    errorOutputs: document.querySelectorAll('.output.error, .output.traceback, .output.stderr').length,
    text: body.innerText || '',
    height: Math.ceil(document.documentElement.scrollHeight),
  };
})()
"""


def _image_bytes(source: str) -> bytes | None:
    if source.startswith("data:"):
        header, _, payload = source.partition(",")
        return base64.b64decode(payload) if header.endswith(";base64") else payload.encode()
    parsed = urlparse(source)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        return path.read_bytes() if path.is_file() else None
    return None


def _is_blank(data: bytes) -> bool:
    """True for an image with a single colour (an empty plot), as decoded by Pillow."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if image.format == "SVG":  # pragma: no cover - Pillow does not read SVG
            return False
        pixels = np.asarray(image.convert("RGBA"))
    return pixels.reshape(-1, 4).std(axis=0).max() == 0


def _is_external(url: str) -> bool:
    return urlparse(url).scheme in ("http", "https", "ws", "wss")


REDIRECT = re.compile(r'<meta http-equiv="refresh" content="\d+;\s*url=([^"]+)"', re.IGNORECASE)


def check_page(browser: DevToolsPipe, page: Path, screenshot: Path | None) -> list[str]:
    """Load one page in a fresh tab; return the problems found (empty: the page is fine).

    A redirect page (the book's index.html) is checked for its target only; the target is a page of its own.
    """
    redirect = REDIRECT.search(page.read_text(errors="replace"))
    if redirect:
        target_path = page.parent / unquote(redirect.group(1).split("#")[0])
        return [] if target_path.is_file() else [f"redirects to a missing page: {redirect.group(1)}"]
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    problems: list[str] = []
    external: list[str] = []
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws://*", "wss://*"]},
                     session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {**VIEWPORT, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.events.clear()
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", session, timeout=60)
        probe = browser.send("Runtime.evaluate", {"expression": _PAGE_PROBE, "awaitPromise": True,
                                                  "returnByValue": True}, session=session, timeout=60)
        if "exceptionDetails" in probe:
            raise RuntimeError(f"the page probe failed: {probe['exceptionDetails']}")
        found = probe["result"]["value"]
        time.sleep(0.2)  # let late console messages arrive
        browser.send("Runtime.evaluate", {"expression": "0"}, session=session)
        requests: dict[str, str] = {}
        for event in [event for event in browser.events if event.get("sessionId") == session]:
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                requests[params["requestId"]] = params["request"]["url"]
            elif method == "Network.loadingFailed":
                url = requests.get(params["requestId"], "?")
                (external if _is_external(url) else problems).append(
                    f"request failed: {url} ({params.get('errorText')})")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                description = (details.get("exception") or {}).get("description") or details.get("text")
                problems.append(f"uncaught JavaScript exception: {description}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                text = " ".join(str(argument.get("value", argument.get("description", "")))
                                for argument in params.get("args", []))
                problems.append(f"console {params['type']}: {text}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                if _is_external(entry.get("url", "")):
                    external.append(f"{entry.get('text')} ({entry.get('url')})")
                else:
                    problems.append(f"console error: {entry.get('text')} ({entry.get('url', '')})")
        for image in found["images"]:
            if not image["loaded"]:
                (external if _is_external(image["src"]) else problems).append(f"missing image: {image['src']}")
                continue
            data = _image_bytes(image["src"])
            if data is not None and not image["src"].endswith(".svg") and _is_blank(data):
                problems.append(f"empty figure (a blank image): {image['src']}")
        problems += [f"empty figure (no image in it): {name!r}" for name in found["emptyFigures"]]
        for match in sorted(set(VISIBLE_REPR.findall(found["text"]))):
            problems.append(f"visible Python repr or traceback: {match!r}")
        if found["formulas"] and not found["typeset"]:
            problems.append(f"math not typeset: {found['formulas']} formula(s) shown as TeX (MathJax did not run)")
        if found["errorOutputs"]:
            problems.append(f"{found['errorOutputs']} error/stderr output(s) shown on the page")
        problems += [f"table wider than the page and not scrolling: {table['width']} px > {table['page']} px "
                     f"({table['head']!r})" for table in found["wide"]]
        if screenshot is not None:
            # The whole page: a viewport as tall as the page (at most 16000 px), so nothing is re-laid out.
            height = max(VIEWPORT["height"], min(int(found["height"]), 16000))
            browser.send("Emulation.setDeviceMetricsOverride",
                         {**VIEWPORT, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
            shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.send("Target.closeTarget", {"targetId": target})
        browser.events.clear()
    problems += [f"asks for the network (blocked; the book is read offline): {item}" for item in external]
    return problems


def book_pages(html_dir: Path) -> list[Path]:
    """Every HTML page of a built book (not the theme's static files or the page sources)."""
    return sorted(path for path in html_dir.rglob("*.html")
                  if not {"_static", "_sources", "_images"} & set(path.relative_to(html_dir).parts))


PAGES = book_pages(HTML) if (HTML / "index.html").is_file() else []
# Problems found by this test in pages whose source the book side does not own, until they are fixed there:
# {page: {problem: why}}. Only these exact problems are tolerated (as xfail); anything else on the page fails.
KNOWN_PROBLEMS: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = find_chromium()
    if executable is None:
        pytest.skip("no chromium installed: run .ci/install-browser (Debian's chromium) to test the built book")
    folder = tmp_path_factory.mktemp("chromium")
    pipe = DevToolsPipe(executable, folder / "profile", folder / "chromium.log")
    try:
        pipe.send("Browser.getVersion", timeout=60)
    except (RuntimeError, TimeoutError) as error:
        pipe.close()
        pytest.fail(f"Chromium did not start: {error}; its log: {(folder / 'chromium.log').read_text()[-2000:]}")
    yield pipe
    pipe.close()


@pytest.mark.parametrize("page", PAGES or [None],
                         ids=lambda page: str(page.relative_to(HTML)) if page else "no-book")
def test_book_page_renders_cleanly(browser, page):
    if page is None:
        pytest.skip(f"the smoke book is not built ({HTML / 'index.html'} is missing): run "
                    f"`anonpaper reproduce --profile smoke` first")
    relative = page.relative_to(HTML)
    screenshot = SCREENSHOTS / (str(relative.with_suffix("")).replace(os.sep, "__") + ".png")
    problems = check_page(browser, page, screenshot)
    known = KNOWN_PROBLEMS.get(relative.as_posix(), {})
    unexpected = [problem for problem in problems if problem not in known]
    assert not unexpected, f"{relative}:\n  " + "\n  ".join(unexpected)
    if not REDIRECT.search(page.read_text(errors="replace")):
        assert screenshot.is_file() and screenshot.stat().st_size > 1000
    if problems:
        pytest.xfail("; ".join(known[problem] for problem in problems))


def test_the_checks_catch_each_problem(browser, tmp_path):
    """A page with every problem the book test looks for, and the same page without them."""
    from PIL import Image

    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[5:15, 5:25] = (200, 40, 40)
    Image.fromarray(pixels).save(tmp_path / "plot.png")
    Image.fromarray(np.full((20, 30, 3), 255, np.uint8)).save(tmp_path / "blank.png")
    wide_table = "<table>" + "<tr>" + "".join(f"<td>column{index:03d}</td>" for index in range(150)) + "</tr></table>"
    good = ("<html><body><main style='max-width:800px'><h1>Fine</h1><figure><img src='plot.png'></figure>"
            f"<div style='overflow-x:auto'>{wide_table}</div><p>Claims hold.</p></main></body></html>")
    (tmp_path / "good.html").write_text(good)
    assert check_page(browser, tmp_path / "good.html", tmp_path / "good.png") == []
    assert (tmp_path / "good.png").stat().st_size > 1000
    bad = ("<html><body><main style='max-width:800px'><h1>Broken</h1>"
           "<script>console.error('boom from the page')</script>"
           "<img src='missing.png'><figure><img src='blank.png'></figure><figure><p>caption only</p></figure>"
           "<pre>&lt;anonpaper.runner.record.Results object at 0x7f3a2b&gt; Claim(id='x')</pre>"
           "<pre>Traceback (most recent call last):</pre>"
           "<img src='https://example.org/remote.png'><p><span class='math'>\\(x^2\\)</span></p>"
           f"{wide_table}</main></body></html>")
    (tmp_path / "bad.html").write_text(bad)
    problems = "\n".join(check_page(browser, tmp_path / "bad.html", None))
    for expected in ("console error: boom from the page", "missing.png", "blank image", "no image in it",
                     "object at 0x7f3a2b", "Claim(", "Traceback (most recent call last)",
                     "table wider than the page", "asks for the network", "math not typeset: 1 formula"):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"


def test_show_table_output_scrolls_and_passes_the_checks(browser, tmp_path):
    """A wide, wordy table from the display helper scrolls inside the page instead of overflowing it."""
    import pandas as pd

    from anonpaper.experiments.display import show_table

    frame = pd.DataFrame({f"metric {index}": [0.123456, float("nan")] for index in range(40)})
    frame.insert(0, "statement", ["A long claim statement that has to wrap rather than widen the table " * 3, "x"])
    markup = show_table(frame, missing="not run")._repr_html_()
    (tmp_path / "table.html").write_text(f"<html><body><main style='max-width:800px'>{markup}</main></body></html>")
    assert check_page(browser, tmp_path / "table.html", None) == []
    (tmp_path / "bare.html").write_text("<html><body><main style='max-width:800px'>"
                                        f"{markup.replace('overflow-x:auto;', '')}</main></body></html>")
    assert any("table wider than the page" in problem for problem in check_page(browser, tmp_path / "bare.html", None))
