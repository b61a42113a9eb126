"""The built book as a reader sees it: every page loaded in headless Chromium at 1280 px, offline.

A page fails on a console error or uncaught exception, a missing image (or a failed local request), an empty
figure (a figure element without an image, a blank image, matplotlib's ``<Figure size ... with 0 Axes>``), a
figure without a caption or with a file name (or hash) for alt text, a visible Python repr (``<... object at 0x``,
``Claim(``, ``np.float64(``, a dict repr such as ``{'a': 1}``) or traceback, a progress log on the page (lines of
``ETA``, ``it/s``, ``s/kimg`` or a progress bar), an error or stderr output, or a visible table wider than the text
column it sits in (scrolling sideways does not count as fitting: a wide table is transposed or folded into a
``<details>`` element). A screenshot of every page goes to ``runs/<profile>/screenshots/``, with the first screen
of the intro, of the first chapter and of the claims ledger as ``first-screen__<page>.png``.

The book is ``runs/<profile>/book/_build/html`` for ``ANONPAPER_BOOK_PROFILE`` (default ``smoke``), else the book
of the committed results, ``runs/results-<profile>/book/_build/html`` (``make read``).

Chromium is Debian's (``.ci/install-browser``), driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``): no driver and no Python package beyond the standard library, nothing downloaded.
External requests are blocked (no network), and a page that asks for one fails: the book is read offline (MathJax
is served from the book's own ``_static/``, see ``book/_ext``). A page with math fails when MathJax typesets none of
it (the reader would see raw TeX).

Run after ``anonpaper reproduce --profile smoke``: ``pytest -m notebooks tests/test_book_browser.py``; for the
committed quick results, ``make read`` then ``ANONPAPER_BOOK_PROFILE=quick pytest -m notebooks
tests/test_book_browser.py``.
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
PROFILE = os.environ.get("ANONPAPER_BOOK_PROFILE", "smoke")
HTML = next((folder for folder in (ROOT / "runs" / PROFILE / "book" / "_build" / "html",
                                   ROOT / "runs" / f"results-{PROFILE}" / "book" / "_build" / "html")
             if (folder / "index.html").is_file()), ROOT / "runs" / PROFILE / "book" / "_build" / "html")
SCREENSHOTS = ROOT / "runs" / PROFILE / "screenshots"
# Pages whose first screen (1280 x 900) is kept as well: what a reader sees before scrolling.
FIRST_SCREENS = ("intro", "chapters/01_snow_vs_snow", "claims_ledger")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync",
         # No network at all: every host name fails to resolve.
         "--host-resolver-rules=MAP * ~NOTFOUND", "--no-default-browser-check", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--remote-debugging-pipe"]
VIEWPORT = {"width": 1280, "height": 900}
VISIBLE_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>|\bClaim\(|Traceback \(most recent call last\)"
                          r"|<Figure size \d+x\d+ with \d+ Axes>|\bnp\.(?:float|int|uint|bool)\w*\("
                          r"|\{['\u2018][^'\u2019\n]{1,80}['\u2019]: ")  # a dict repr, its quotes made curly or not
# A line of a progress log: a done/total counter with a rate or an ETA ("3.00/16 kimg, 14 s/kimg, ETA 2.9 min"), or
# a tqdm bar ("25%|##  | 1/4 [00:01<00:03]"). Three such lines make a log.
PROGRESS_LINE = re.compile(r"\d+(?:\.\d+)?\s*/\s*\d+(?:\.\d+)?\b.*(?:\bETA\b|it/s|s/it|s/kimg)"
                           r"|\d+%\|[^|\n]*\|\s*\d+/\d+")
PROGRESS_LINES = 3
# An alt text that is a file name or a content hash says nothing about the figure.
FILE_NAME_ALT = re.compile(r"(?:^|/)[0-9a-f]{16,}(?:\.\w+)?$|\.(?:png|jpe?g|svg|gif)$", re.IGNORECASE)


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
  // Shown on the screen: laid out with a size, not inside a closed <details> (whose content keeps a size).
  const visible = element => { const box = element.getBoundingClientRect();
                               return box.width > 0 && box.height > 0 && !element.closest('details:not([open])')
                                      && (!element.checkVisibility || element.checkVisibility()); };
  // The text column: the article's content box (the page's main element when there is no article).
  const column = document.querySelector('article.bd-article, article, main') || body;
  const style = getComputedStyle(column);
  const columnBox = column.getBoundingClientRect();
  const columnLeft = columnBox.left + parseFloat(style.paddingLeft || 0);
  const columnRight = Math.min(document.documentElement.clientWidth,
                               columnBox.right - parseFloat(style.paddingRight || 0));
  const wide = [];
  for (const table of document.querySelectorAll('table')) {
    if (!visible(table)) continue;   // a table folded in a closed <details> is not on the screen
    const box = table.getBoundingClientRect();
    if (box.width > columnRight - columnLeft + 1) {
      wide.push({width: Math.round(box.width), page: Math.round(columnRight - columnLeft),
                 head: (table.innerText || '').slice(0, 80)});
    }
  }
  // Figures: every content image sits in a <figure> with a caption, and its alt text says what it shows.
  const uncaptioned = [], unnamed = [];
  for (const image of new Set(document.querySelectorAll('article img, main img'))) {
    if (!visible(image)) continue;
    const figure = image.closest('figure, div.figure');
    const caption = figure && figure.querySelector('figcaption, .caption');
    if (!caption || !(caption.innerText || '').trim()) uncaptioned.push(image.getAttribute('src') || '');
    unnamed.push({src: image.getAttribute('src') || '', alt: (image.getAttribute('alt') || '').trim()});
  }
  // The text a reader sees: what a closed <details> folds away (a folded table, a hidden code cell) is not on it.
  const shownText = () => {
    const folded = [...document.querySelectorAll('details:not([open]) > :not(summary)')];
    const display = folded.map(element => element.style.display);
    folded.forEach(element => { element.style.display = 'none'; });
    const text = body.innerText || '';
    folded.forEach((element, index) => { element.style.display = display[index]; });
    return text;
  };
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
    wide: wide, emptyFigures: emptyFigures, uncaptioned: uncaptioned, alts: unnamed,
    formulas: formulas, typeset: document.querySelectorAll('mjx-container').length,
    errorOutputs: document.querySelectorAll('.output.error, .output.traceback, .output.stderr').length,
    text: shownText(),
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


def check_page(browser: DevToolsPipe, page: Path, screenshot: Path | None,
               first_screen: Path | None = None) -> list[str]:
    """Load one page in a fresh tab; return the problems found (empty: the page is fine).

    ``screenshot`` gets the whole page, ``first_screen`` what the 1280 x 900 window shows before scrolling.
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
        problems += [f"table wider than its column: {table['width']} px > {table['page']} px ({table['head']!r})"
                     for table in found["wide"]]
        problems += [f"figure without a caption: {Path(source).name}" for source in found["uncaptioned"]]
        problems += [f"figure without meaningful alt text: {Path(image['src']).name} (alt {image['alt']!r})"
                     for image in found["alts"] if not image["alt"] or FILE_NAME_ALT.search(image["alt"])]
        progress = [line for line in found["text"].splitlines() if PROGRESS_LINE.search(line)]
        if len(progress) >= PROGRESS_LINES:
            problems.append(f"progress log on the page: {len(progress)} lines like {progress[0].strip()[:80]!r}")
        if first_screen is not None:
            shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
            first_screen.parent.mkdir(parents=True, exist_ok=True)
            first_screen.write_bytes(base64.b64decode(shot["data"]))
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
        pytest.skip(f"the {PROFILE} book is not built ({HTML / 'index.html'} is missing): run "
                    f"`anonpaper reproduce --profile {PROFILE}` (or `make read PROFILE={PROFILE}`) first")
    relative = page.relative_to(HTML)
    name = str(relative.with_suffix("")).replace(os.sep, "__")
    screenshot = SCREENSHOTS / f"{name}.png"
    first_screen = (SCREENSHOTS / f"first-screen__{name}.png"
                    if relative.with_suffix("").as_posix() in FIRST_SCREENS else None)
    problems = check_page(browser, page, screenshot, first_screen)
    known = KNOWN_PROBLEMS.get(relative.as_posix(), {})
    unexpected = [problem for problem in problems if problem not in known]
    assert not unexpected, f"{relative}:\n  " + "\n  ".join(unexpected)
    if not REDIRECT.search(page.read_text(errors="replace")):
        assert screenshot.is_file() and screenshot.stat().st_size > 1000
    if first_screen is not None:
        assert first_screen.is_file() and first_screen.stat().st_size > 1000
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
    good = ("<html><body><main style='max-width:800px'><h1>Fine</h1>"
            "<figure><img src='plot.png' alt='A red rectangle on black'><figcaption>Fig. 1 A plot.</figcaption>"
            f"</figure><details><summary>show the wide table</summary>{wide_table}</details>"
            "<table><tr><td>a narrow table</td><td>0.5 ± 0.1</td></tr></table>"
            "<p>Claims hold: accuracy 0.62 (paper 0.75), 12 s per run.</p></main></body></html>")
    (tmp_path / "good.html").write_text(good)
    assert check_page(browser, tmp_path / "good.html", tmp_path / "good.png", tmp_path / "first.png") == []
    assert (tmp_path / "good.png").stat().st_size > 1000 and (tmp_path / "first.png").stat().st_size > 1000
    bad = ("<html><body><main style='max-width:800px'><h1>Broken</h1>"
           "<script>console.error('boom from the page')</script>"
           "<img src='missing.png'><figure><img src='blank.png' alt='blank'><figcaption>Blank</figcaption></figure>"
           "<figure><p>caption only</p></figure>"
           "<pre>&lt;anonpaper.runner.record.Results object at 0x7f3a2b&gt; Claim(id='x')</pre>"
           "<pre>Traceback (most recent call last):</pre>"
           "<img src='https://example.org/remote.png'><p><span class='math'>\\(x^2\\)</span></p>"
           f"{wide_table}</main></body></html>")
    (tmp_path / "bad.html").write_text(bad)
    problems = "\n".join(check_page(browser, tmp_path / "bad.html", None))
    for expected in ("console error: boom from the page", "missing.png", "blank image", "no image in it",
                     "object at 0x7f3a2b", "Claim(", "Traceback (most recent call last)",
                     "table wider than its column", "asks for the network", "math not typeset: 1 formula"):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"


@pytest.mark.parametrize("planted, expected", [
    ("<div style='overflow-x:auto'><table><tr>" + "".join(f"<td>value{index:03d}</td>" for index in range(60))
     + "</tr></table></div>", "table wider than its column: "),
    ("<div class='cell_output'><img src='plot.png' alt='A red rectangle'></div>", "figure without a caption: plot.png"),
    ("<figure><img src='plot.png' alt='../_images/3f9a0c1d2e4b5a6978877665544332211.png'><figcaption>Fig. 2 "
     "Scores.</figcaption></figure>", "figure without meaningful alt text: plot.png"),
    ("<p>ours: identity similarity np.float64(0.9252)</p>", "visible Python repr or traceback: 'np.float64('"),
    ("<p>Paper {'original': 0.0, 'target': 82.65}; ours 3.33</p>",
     "visible Python repr or traceback: \"{'original': \""),
    ("<pre>" + "".join(f"fundus-sg3t: {step}.00/16 kimg, 13 s/kimg, ETA {3.4 - step / 10:.1f} min\n"
                       for step in range(1, 5)) + "</pre>", "progress log on the page: 4 lines like "),
    ("<pre>" + "".join(f"training: {step * 25}%|{'#' * step}{' ' * (4 - step)}| {step}/4 [00:0{step}<00:03]\n"
                       for step in range(1, 4)) + "</pre>", "progress log on the page: 3 lines like "),
])
def test_each_planted_problem_is_reported(browser, tmp_path, planted, expected):
    """One problem at a time, in an otherwise clean page: an over-wide table (even one that scrolls), an uncaptioned
    figure, a file-name alt text, ``np.float64(`` and a dict repr in the text, a progress log; the clean page passes."""
    from PIL import Image

    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[5:15, 5:25] = (200, 40, 40)
    Image.fromarray(pixels).save(tmp_path / "plot.png")
    clean = ("<html><body><main style='max-width:800px'><h1>Chapter</h1><p>Accuracy 0.62 (paper 0.75).</p>"
             "<figure><img src='plot.png' alt='A red rectangle'><figcaption>Fig. 1 A plot.</figcaption></figure>"
             "{}</main></body></html>")
    (tmp_path / "clean.html").write_text(clean.format(""))
    assert check_page(browser, tmp_path / "clean.html", None) == []
    (tmp_path / "planted.html").write_text(clean.format(planted))
    problems = check_page(browser, tmp_path / "planted.html", None)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_show_table_output_fits_and_passes_the_checks(browser, tmp_path):
    """A wide, wordy table from the display helper is folded (closed) instead of overflowing the column; a wide
    table with few rows is transposed to fit; the same markup laid out as one wide table fails."""
    import pandas as pd

    from anonpaper.experiments.display import show_table

    frame = pd.DataFrame({f"metric {index}": [0.123456, float("nan")] * 5 for index in range(40)})
    frame.insert(0, "statement", [f"A long claim statement {row} that has to wrap rather than widen the table " * 3
                                  for row in range(10)])
    folded = show_table(frame, missing="not run")
    transposed = show_table(pd.DataFrame({"method": ["Snow", "VS-Snow"],
                                          **{f"metric {index}": [0.1234, 0.5] for index in range(20)}}))
    assert (folded.layout(), transposed.layout()) == ("folded", "transposed")
    for name, table in (("folded", folded), ("transposed", transposed)):
        (tmp_path / f"{name}.html").write_text("<html><body><main style='max-width:800px'>"
                                               f"{table._repr_html_()}</main></body></html>")
        assert check_page(browser, tmp_path / f"{name}.html", None) == [], name
    (tmp_path / "wide.html").write_text("<html><body><main style='max-width:800px'><div class='anonpaper-table'>"
                                        f"{folded._table_html(False)}</div></main></body></html>")
    assert any("table wider than its column" in problem
               for problem in check_page(browser, tmp_path / "wide.html", None))
