"""Headless Chromium for tests that look at a page the way a person does.

Chromium is driven over the DevTools protocol on ``--remote-debugging-pipe``:
the browser reads commands from its file descriptor 3 and writes replies and
events to its descriptor 4, each message a JSON object ended by a NUL byte.
No port, no websocket and no dependency beyond the standard library.

``load_page`` opens a file at a given window width, collects every console
error, uncaught exception and browser log error the page causes, measures the
page with one script (:data:`FACTS_SCRIPT`) and can save a full-page
screenshot. Tests then assert on plain Python values.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
"""Where the screenshots go: a git-ignored folder of the checkout, kept after the run."""

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
PHONE_WIDTH = 600
"""Widths below this are emulated as a mobile device (the viewport meta tag applies)."""
WINDOW_HEIGHT = {True: 844, False: 800}
"""Viewport height for a phone (True) and a laptop (False)."""

FACTS_SCRIPT = """
(() => {
  const text = (node) => (node ? node.textContent.replace(/\\s+/g, " ").trim() : null);
  const pick = (selector) => [...document.querySelectorAll(selector)].map(text);
  return {
    text: document.body.innerText,
    headings: [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")].map(
      (h) => [Number(h.tagName[1]), text(h)]),
    tables: [...document.querySelectorAll("table")].map((table) => ({
      label: text(table.caption) || table.getAttribute("aria-label"),
      rows: [...table.rows].map((row) => [...row.cells].map(text)),
      width: table.getBoundingClientRect().width,
      container_width: table.parentElement.clientWidth,
    })),
    svgs: [...document.querySelectorAll("svg")].map((svg) => {
      const box = svg.getBoundingClientRect();
      return {
        label: svg.getAttribute("aria-label") || text(svg.querySelector("title")),
        width: box.width,
        height: box.height,
        polylines: [...svg.querySelectorAll("polyline")].map((line) => line.points.numberOfItems),
        paths: [...svg.querySelectorAll("path")].map((path) => path.getTotalLength()),
        rects: [...svg.querySelectorAll("rect")].map((rect) => rect.getBBox().width),
        cut_text: [...svg.querySelectorAll("text")].filter((label) => {
          const r = label.getBoundingClientRect();
          return r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
        }).map(text),
      };
    }),
    urls: [...document.querySelectorAll("[src], [href]")].map(
      (node) => node.getAttribute("src") || node.getAttribute("href")),
    scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth,
    client_width: document.documentElement.clientWidth,
    selected: Object.fromEntries(SELECTORS.map((selector) => [selector, pick(selector)])),
  };
})()
"""
"""Measures the loaded page; ``SELECTORS`` is replaced by the JSON list of selectors asked for."""


class DevToolsError(RuntimeError):
    """Chromium failed to start, answered with an error, or did not answer in time."""


def chromium_executable() -> str | None:
    """The Chromium on PATH (Debian's package name is ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _above_stdio(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` numbered 10 or more; ``fd`` itself is closed."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """One headless Chromium process and its DevTools pipe; use it as a context manager."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        """Start Chromium with a fresh profile; ``timeout`` bounds every wait for a reply."""
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="diffgrade-chromium-"))
        self.log = self.profile / "chromium.log"
        commands_in, commands_out = (_above_stdio(fd) for fd in os.pipe())
        replies_in, replies_out = (_above_stdio(fd) for fd in os.pipe())
        argv = [executable, *FLAGS, f"--user-data-dir={self.profile / 'profile'}", "about:blank"]
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(self.log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
            (os.POSIX_SPAWN_DUP2, commands_in, 3),
            (os.POSIX_SPAWN_DUP2, replies_out, 4),
        ]
        try:
            self.pid = os.posix_spawn(executable, argv, dict(os.environ), file_actions=actions, setsid=True)
        finally:
            os.close(commands_in)
            os.close(replies_out)
        self._commands = commands_out
        self._replies = replies_in
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self.send("Browser.getVersion")  # the pipe answers: the browser is up
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Chromium:
        """The browser itself."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the browser."""
        self.close()

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The next message from the browser, waiting until ``deadline`` at most."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise DevToolsError(f"no answer from Chromium in {self.timeout} s; its log:\n{self.log_text()}")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise DevToolsError(f"Chromium closed its DevTools pipe; its log:\n{self.log_text()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Call one DevTools method and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") != self._next_id:
                self.events.append(reply)
            elif "error" in reply:
                raise DevToolsError(f"{method} failed: {reply['error']}")
            else:
                return reply.get("result", {})

    def wait_for(self, method: str, session: str) -> dict[str, Any]:
        """Wait for an event of ``session`` (one already received counts) and return its params."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event.get("params", {})
            seen = len(self.events)
            self.events.append(self._receive(deadline))

    def log_text(self) -> str:
        """What Chromium printed on its standard output and error."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        """Ask the browser to quit, end its process group if it lingers, and remove the profile."""
        try:
            self.send("Browser.close")
        except (DevToolsError, OSError):
            pass
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the browser's own group: renderer and helpers
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self._commands)
        os.close(self._replies)
        shutil.rmtree(self.profile, ignore_errors=True)


@dataclass
class PageLoad:
    """What a loaded page showed: measured facts, errors reported, the screenshot written."""

    facts: dict[str, Any]
    errors: list[str]
    screenshot: Path | None


def _error_text(event: dict[str, Any]) -> str | None:
    """A one-line description of an event that reports an error, or None for other events."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        description = details.get("exception", {}).get("description") or details.get("text", "")
        return f"uncaught exception: {description}"
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        parts = [str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])]
        return f"console.{params['type']}: {' '.join(parts)}"
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip()
    return None


def load_page(
    browser: Chromium, path: Path, width: int, screenshot: str | None = None, selectors: tuple[str, ...] = ()
) -> PageLoad:
    """Open ``path`` (file://) in a new tab ``width`` CSS pixels wide and report what it shows.

    Errors are the console errors and assertions, uncaught exceptions and
    browser log errors (such as a resource that failed to load) of the tab.
    ``screenshot`` names a PNG written to :data:`SCREENSHOTS` with the whole
    page; ``selectors`` are CSS selectors whose elements' texts come back in
    ``facts["selected"]``.
    """
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    try:
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session=session)
        mobile = width < PHONE_WIDTH
        metrics = {"width": width, "height": WINDOW_HEIGHT[mobile], "deviceScaleFactor": 1, "mobile": mobile}
        browser.send("Emulation.setDeviceMetricsOverride", metrics, session=session)
        first_event = len(browser.events)
        browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", session)
        script = FACTS_SCRIPT.replace("SELECTORS", json.dumps(list(selectors)))
        result = browser.send("Runtime.evaluate", {"expression": script, "returnByValue": True}, session=session)
        if "exceptionDetails" in result:
            raise DevToolsError(f"the facts script failed: {result['exceptionDetails']}")
        facts = result["result"]["value"]
        events = [e for e in browser.events[first_event:] if e.get("sessionId") == session]
        errors = [text for text in map(_error_text, events) if text is not None]
        written = None
        if screenshot is not None:
            size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            shot = browser.send(
                "Page.captureScreenshot",
                {"format": "png", "clip": clip, "captureBeyondViewport": True},
                session=session,
            )
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            written = SCREENSHOTS / screenshot
            written.write_bytes(base64.b64decode(shot["data"]))
        return PageLoad(facts, errors, written)
    finally:
        browser.send("Target.closeTarget", {"targetId": target})
        browser.events.clear()
