"""Headless Chromium driven over the Chrome DevTools Protocol (CDP), for UI tests that act as a
person would: open a page, type into it, press a button, take a screenshot. The protocol is spoken
over one WebSocket (the ``websockets`` package), with Debian's ``chromium``; no browser driver.

Protocol reference: https://chromedevtools.github.io/devtools-protocol/ (``Page.navigate``,
``Runtime.evaluate``, ``Page.captureScreenshot``)."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

from kappa.core import processes
from kappa.harness.env import free_port


def chromium() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``) on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page. ``with Browser(profile_dir) as b: b.goto(url)``."""

    def __init__(self, profile: Path, width: int = 1600, height: int = 1100):
        exe = chromium()
        assert exe, "chromium is not installed: `make test` installs Debian's chromium package"
        port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--remote-debugging-port={port}",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                    pages = [t for t in json.loads(resp.read()) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and self.proc.poll() is None, "chromium did not open its debugging port"
            time.sleep(0.5)
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._ids = itertools.count(1)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.ws.close()
        finally:
            processes.terminate(self.proc.pid, grace_s=10, group=True)

    def call(self, method: str, timeout: float = 60, **params) -> dict:
        """Send one CDP command and return its ``result`` (events in between are dropped). Raises
        ``AssertionError`` with the protocol's error."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            answer = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if answer.get("id") == msg_id:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return answer["result"]

    def eval(self, expression: str):
        """The value of a JavaScript ``expression`` in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        """Open ``url`` in the page."""
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float = 90, what: str | None = None):
        """Poll ``expression`` until it is truthy; return its value. Fails naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.eval(expression)
            except AssertionError:  # the page is navigating
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what or expression}"
            time.sleep(0.5)

    def click_button(self, label: str) -> None:
        """Click the first enabled ``<button>`` whose text is ``label`` (waits until there is one)."""
        self.wait_for(f"""(() => {{ const b = [...document.querySelectorAll('button')]
            .find(x => x.textContent.trim() === {json.dumps(label)} && !x.disabled);
            if (b) {{ b.click(); return true; }} return false; }})()""", what=f"an enabled {label!r} button")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the page as shown."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path
