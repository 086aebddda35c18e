"""LibreTranslate's own web front end against LSMT's LibreTranslate-compatible API (issue 49,
"the drop-in claim"): the page of an installed ``libretranslate`` package, unmodified, in
headless Chromium, every API request it makes answered by LSMT.

    python -m loadtests.lt_front_end [--bundle models/default] [--libretranslate PATH]
                                     [--text "..."] [--target es] [--out runs/lt-front-end]

``--libretranslate`` is the package's folder (``.../site-packages/libretranslate``; default: the
one in runs/peer-venv, which ``python -m loadtests.peer`` installs); the Python of the virtualenv
around it renders the page.

How the page is served, and why this way. The page is two Jinja templates (``index.html`` and
``app.js.template``: its helpers ``_h``/``_e``, ``url_for``, flask_babel) plus the package's
``static`` folder, and its script sends every API request to its own origin
(``BaseUrl = location.host + url_prefix``). LibreTranslate's ``create_app`` would also load
argostranslate and its language models, which this check does not need, so the two templates
are rendered once with the package's own Flask, flask_babel and Jinja helpers
(``libretranslate/locales.py``), with the values its ``index()`` and ``appjs()`` pass for a
default server (no API secret, not under attack, no URL prefix; its key button shown when LSMT
uses keys). Chromium then opens LSMT's own address, and Playwright answers ``/``,
``/js/app.js`` and ``/static/...`` from the rendered page and the package's folder; every
other request goes, unchanged, to LSMT: the page sees what it would if LSMT served it, and no
proxy stands in between. Requests to any other origin are refused and recorded.

The run: the page loads (``/frontend/settings``, ``/languages``), its language lists are
compared with LSMT's ``/languages`` (source: the languages and "Auto Detect"; target: every
language for auto, a named source's targets otherwise), a target is picked, a lone line break
typed (the page sends it: no error may follow), then an English sentence with the source on
"Auto Detect": the translation must appear, equal to what LSMT answers a JSON request with the
same fields, and the page must show the detected language; the source is then set to English
(the page translates again, with no detection shown), HTML typed (the page sends
``format=html``: the tags must come back), and a .txt file translated through the page's
"Translate Files" (``/translate_file``, the file the page downloads, its link). A second LSMT
requiring a key: the page's request without one must show LSMT's 401 message, and the key given
through the page's own key button must be sent (``api_key``) and accepted. The page itself
never calls ``/detect`` (detection comes with ``/translate``'s ``detectedLanguage``), nor
``/suggest`` while ``/frontend/settings`` says suggestions are off.

Saved under ``--out``: ``lt_front_end.json`` (checks, every request the page made with its
answer, the page's state), ``lt_front_end.csv`` (a line per check), ``lt_front_end.png``, the
rendered pages (``page/``, ``page-keys/``).
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from loadtests.chromium import CHROMIUM_ARGS, find_chromium
from loadtests.results import print_checks, write_results
from loadtests.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Where is the train station? I would like to buy a ticket for tomorrow morning."
HTML = "<b>Good morning</b>, my friend."
KEY = "lt-front-end-key"  # the key the second server requires
TIMEOUT_MS = 120_000  # a translation on a busy 2-core machine, first engine load included
SOURCE_SELECT = "select[aria-labelledby=sourceLangLabel]"
TARGET_SELECT = "select[aria-labelledby=targetLangLabel]"

# Run by the Python around the package: renders its two templates with its own Flask,
# flask_babel and Jinja helpers (locales.py is loaded alone: importing the package would import
# argostranslate and torch). The values are those LibreTranslate's index() and appjs() pass for
# a default server. argv: package folder, output folder, "1" when the key button is shown.
RENDER = """
import importlib.util, json, sys
from importlib.metadata import version
from pathlib import Path
from flask import Blueprint, Flask, render_template
from flask_babel import Babel
pkg, out, api_keys = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
spec = importlib.util.spec_from_file_location("lt_locales", pkg / "locales.py")
locales = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locales)
app = Flask("libretranslate", root_path=str(pkg))
bp = Blueprint("Main app", "libretranslate", root_path=str(pkg))
bp.add_url_rule("/", "index", lambda: "")
app.register_blueprint(bp)
app.config["BABEL_TRANSLATION_DIRECTORIES"] = str(pkg / "locales")
Babel(app, locale_selector=lambda: "en")
app.jinja_env.globals.update(_e=locales.gettext_escaped, _h=locales.gettext_html)
v = version("libretranslate")
with app.test_request_context("/"):
    index = render_template(
        "index.html", frontendTimeout=500, api_keys=api_keys, get_api_key_link="",
        web_version=False, version=v, swagger_url="/docs",
        available_locales=[{"code": "en", "name": "English"}], current_locale="en",
        alternate_locales=[], under_attack=False, hide_api=False, frontend_title="")
    appjs = render_template(
        "app.js.template", url_prefix="", get_api_key_link="", api_secret="",
        bogus_api_secret="", under_attack=False)
(out / "js").mkdir(parents=True, exist_ok=True)
(out / "index.html").write_text(index)
(out / "js" / "app.js").write_text(appjs)
print(json.dumps({"version": v}))
"""


def default_package() -> Path | None:
    found = sorted((ROOT / "runs" / "peer-venv").glob("lib/python*/site-packages/libretranslate"))
    return found[-1] if found else None


def package_python(package: Path) -> Path:
    """The Python of the virtualenv the package is installed in."""
    venv = package.parents[3]  # <venv>/lib/pythonX.Y/site-packages/libretranslate
    return venv / "bin" / "python"


def render_page(package: Path, python: Path, out: Path, api_keys: bool) -> str:
    """Renders the page into ``out`` (index.html, js/app.js); returns the package's version."""
    done = subprocess.run(
        [str(python), "-c", RENDER, str(package), str(out), "1" if api_keys else "0"],
        check=True,
        capture_output=True,
        text=True,
    )
    return str(json.loads(done.stdout.strip().splitlines()[-1])["version"])


def chromium() -> str:
    path = find_chromium()
    if path is None:
        sys.exit("chromium not found: `make test` installs it (Debian's package)")
    return path


def _form_fields(body: str | None, ctype: str) -> list[str]:
    """The field names of a request body, for the record (values are in the answer)."""
    if not body:
        return []
    if ctype.startswith("multipart/form-data"):
        return re.findall(r'; name="([^"]+)"', body)  # not filename=
    if ctype.startswith("application/json"):
        try:
            return sorted(json.loads(body))
        except (ValueError, TypeError):
            return []
    return [p.split("=", 1)[0] for p in body.split("&") if p]


class Recorder:
    """Serves the page's own files, lets the rest through to LSMT, and keeps what went by."""

    def __init__(self, lsmt_url: str, page_dir: Path, static_dir: Path) -> None:
        self.origin = lsmt_url
        self.page_dir, self.static_dir = page_dir, static_dir
        self.served: list[str] = []  # the page's own files
        self.refused: list[str] = []  # other origins
        self.exchanges: list[Any] = []  # the responses of what went to LSMT
        self.downloads: list[str] = []  # the files the page had the browser download

    def route(self, route: Any) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.origin:
            self.refused.append(url)
            route.abort()
            return
        path = parts.path
        if path == "/":
            file = self.page_dir / "index.html"
        elif path == "/js/app.js":
            file = self.page_dir / "js" / "app.js"
        elif path.startswith("/static/"):
            file = (self.static_dir / path.removeprefix("/static/")).resolve()
            if not file.is_relative_to(self.static_dir.resolve()) or not file.is_file():
                route.fulfill(status=404, body="not found")
                return
        else:
            route.continue_()  # to LSMT, unchanged
            return
        self.served.append(path)
        ctype = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if file.suffix == ".js":
            ctype = "application/javascript; charset=utf-8"
        route.fulfill(status=200, body=file.read_bytes(), content_type=ctype)

    def on_response(self, response: Any) -> None:
        if response.url.startswith(self.origin) and response.request.resource_type in (
            "xhr",
            "fetch",
            "document",
            "other",
        ):
            path = urlsplit(response.url).path
            if path not in ("/", "/js/app.js"):
                self.exchanges.append(response)

    def record(self) -> list[dict[str, Any]]:
        rows = []
        for resp in self.exchanges:
            req = resp.request
            ctype = req.headers.get("content-type", "")
            try:
                body: Any = resp.json()
            except Exception:
                body = f"<{len(resp.body())} bytes>"
            rows.append(
                {
                    "method": req.method,
                    "path": urlsplit(resp.url).path,
                    "request_content_type": ctype.split(";")[0],
                    "fields": _form_fields(_text(req.post_data_buffer), ctype),
                    "status": resp.status,
                    "answer": body,
                }
            )
        return rows


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _check(checks: list[dict[str, Any]], name: str, passed: bool, detail: Any) -> bool:
    checks.append({"check": name, "passed": bool(passed), "detail": detail})
    return bool(passed)


def _options(page: Any, selector: str) -> list[str]:
    return list(page.eval_on_selector_all(f"{selector} option", "os => os.map(o => o.value)"))


def _state(page: Any) -> dict[str, Any]:
    return dict(
        page.evaluate(
            """() => { const a = window._vueApp; return {error: a.error, loading: a.loading,
            sourceLang: a.sourceLang, targetLang: a.targetLang, inputText: a.inputText,
            translatedText: a.translatedText, detectedLangText: a.detectedLangText,
            translationType: a.translationType, translatedFileUrl: a.translatedFileUrl}; }"""
        )
    )


def _translating(text: str) -> Any:
    """Matches the answer to the page's /translate request whose q is ``text`` (the page may
    send a request for part of what is typed when typing pauses)."""

    def match(response: Any) -> bool:
        if urlsplit(response.url).path != "/translate":
            return False
        body = response.request.post_data or ""
        sent = text.replace("\n", "\r\n")  # a form's line breaks travel as CRLF
        return f'name="q"\r\n\r\n{sent}\r\n--' in body  # the whole value: the boundary next

    return match


def _wait_translated(page: Any) -> None:
    page.wait_for_function(
        "() => { const a = window._vueApp; return a && !a.loadingTranslation && "
        "(a.translatedText !== '' || a.error !== ''); }",
        timeout=TIMEOUT_MS,
    )


def open_page(pw: Any, url: str, recorder: Recorder, console: list[str]) -> tuple[Any, Any]:
    """Chromium with the page open at LSMT's address, loaded (settings and languages)."""
    browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
    context = browser.new_context(accept_downloads=True, viewport={"width": 1100, "height": 900})
    page = context.new_page()
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.route("**/*", recorder.route)
    page.on("response", recorder.on_response)
    page.on("download", lambda d: recorder.downloads.append(d.suggested_filename))
    page.goto(url + "/", timeout=TIMEOUT_MS)
    page.wait_for_function("() => window._vueApp && !window._vueApp.loading", timeout=TIMEOUT_MS)
    page.wait_for_selector(f"{TARGET_SELECT} option", state="attached")
    return browser, page


def drive_keyed(url: str, recorder: Recorder, args: argparse.Namespace) -> dict[str, Any]:
    """LSMT requiring a key: the page's request without one gets LSMT's 401, shown on the page;
    the key given through the page's own key button (its prompt) is then sent and accepted."""
    from playwright.sync_api import sync_playwright

    checks: list[dict[str, Any]] = []
    result: dict[str, Any] = {"checks": checks}
    console: list[str] = []
    with sync_playwright() as pw:
        browser, page = open_page(pw, url, recorder, console)
        try:
            page.select_option(SOURCE_SELECT, "en")
            page.select_option(TARGET_SELECT, args.target)
            box = page.locator("#textarea1")
            with page.expect_response(_translating(args.text), timeout=TIMEOUT_MS) as refused:
                box.fill(args.text)
            page.wait_for_function("() => window._vueApp.error !== ''", timeout=TIMEOUT_MS)
            error = _state(page)["error"]
            _check(checks, "keys: without a key, LSMT's 401 and its message on the page",
                   refused.value.status == 401 and bool(error), error)  # fmt: skip
            page.get_by_text("Dismiss").click()
            page.once("dialog", lambda dialog: dialog.accept(KEY))
            page.locator("a[href='javascript:setApiKey()']").first.click()
            box.fill("")  # the page clears its output and asks nothing
            with page.expect_response(_translating(args.text), timeout=TIMEOUT_MS) as answered:
                box.fill(args.text)
            _wait_translated(page)
            state = _state(page)
            sent_key = f'name="api_key"\r\n\r\n{KEY}\r\n' in (
                answered.value.request.post_data or ""
            )
            _check(checks, "keys: the key from the page's key button is sent and accepted",
                   answered.value.status == 200 and sent_key and state["error"] == ""
                   and state["translatedText"].strip() != "", state["translatedText"])  # fmt: skip
        except Exception as exc:  # a step that could not be done: recorded, the rest skipped
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _check(checks, "keys: every step could be done", False, message)
        finally:
            result["console"] = console
            result["requests"] = recorder.record()
            browser.close()
    return result


def drive(url: str, recorder: Recorder, args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    checks: list[dict[str, Any]] = []
    result: dict[str, Any] = {"checks": checks}
    lsmt_langs = httpx.get(f"{url}/languages", timeout=30).json()
    codes = {lang["code"] for lang in lsmt_langs}
    targets = {lang["code"]: set(lang["targets"]) for lang in lsmt_langs}
    console: list[str] = []
    with sync_playwright() as pw:
        browser, page = open_page(pw, url, recorder, console)
        try:
            state = _state(page)
            _check(checks, "page loaded (settings, languages)", state["error"] == "", state)
            sources = _options(page, SOURCE_SELECT)
            _check(checks, "source list: LSMT's languages and Auto Detect",
                   sorted(sources) == sorted(codes | {"auto"}), sources)  # fmt: skip
            auto_targets = _options(page, TARGET_SELECT)
            _check(checks, "target list for Auto Detect: every language",
                   sorted(auto_targets) == sorted(codes), auto_targets)  # fmt: skip
            page.select_option(SOURCE_SELECT, "en")
            en_targets = _options(page, TARGET_SELECT)
            _check(checks, "target list for English: LSMT's targets of en",
                   set(en_targets) == targets.get("en", set()), en_targets)  # fmt: skip
            page.select_option(SOURCE_SELECT, "auto")
            page.select_option(TARGET_SELECT, args.target)
            box = page.locator("#textarea1")
            with page.expect_response(_translating("\n"), timeout=TIMEOUT_MS):
                box.press("Enter")  # the page sends the lone line break once typing pauses
            _wait_translated(page)
            state = _state(page)
            blank = {"error": state["error"], "translatedText": state["translatedText"]}
            _check(checks, "a lone line break in the box: no error", state["error"] == "", blank)
            box.press("Backspace")  # empty again: the page clears its output, asks nothing
            with page.expect_response(_translating(args.text), timeout=TIMEOUT_MS):
                box.press_sequentially(args.text, delay=20)
            _wait_translated(page)
            state = _state(page)
            same = {"q": args.text, "source": "auto", "target": args.target,
                    "format": "text", "alternatives": 3}  # fmt: skip
            direct = httpx.post(f"{url}/translate", json=same, timeout=120).json()
            result["typed"] = {"page": state, "json_request": direct}
            _check(checks, f"translation appears (auto -> {args.target})",
                   state["error"] == "" and state["translatedText"].strip() != ""
                   and state["translatedText"] == direct.get("translatedText"),
                   state["translatedText"])  # fmt: skip
            label = page.evaluate(  # the label and the detected language after it
                "() => document.getElementById('sourceLangLabel')?.parentElement.innerText || ''"
            )
            _check(checks, "detected language shown (Auto Detect)",
                   "English" in state["detectedLangText"] and "English" in label,
                   label.replace("\n", " ")[:80])  # fmt: skip
            page.screenshot(path=str(args.out / "lt_front_end.png"), full_page=True)
            with page.expect_response(lambda r: urlsplit(r.url).path == "/translate"):
                page.select_option(SOURCE_SELECT, "en")
            _wait_translated(page)
            state = _state(page)
            result["named_source"] = state
            _check(checks, f"translation with the source named (en -> {args.target})",
                   state["error"] == "" and state["translatedText"].strip() != ""
                   and state["detectedLangText"] == "", state["translatedText"])  # fmt: skip
            box.press("Control+a")
            with page.expect_response(_translating(HTML), timeout=TIMEOUT_MS):
                box.press_sequentially(HTML, delay=20)  # the page then sends format=html
            _wait_translated(page)
            state = _state(page)
            result["html"] = state
            _check(checks, "HTML in the box (format=html): tags kept",
                   state["error"] == "" and "<b>" in state["translatedText"]
                   and "</b>" in state["translatedText"], state["translatedText"])  # fmt: skip
            result["file"] = translate_file(page, recorder, args)
            _check(checks, "file translation (Translate Files, download link)",
                   result["file"]["ok"], result["file"])  # fmt: skip
        except Exception as exc:  # a step that could not be done: recorded, the rest skipped
            state = _state(page) if not page.is_closed() else {}
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _check(checks, "every step could be done", False,
                   {"exception": message, "page_error": state.get("error")})  # fmt: skip
            page.screenshot(path=str(args.out / "lt_front_end.png"), full_page=True)
        finally:
            result["console"] = console
            result["requests"] = recorder.record()
            browser.close()
    seen = result["requests"]
    translate_types = sorted({r["request_content_type"] for r in seen if r["path"] == "/translate"})
    _check(checks, "every API request the page made was answered 2xx",
           seen and all(200 <= r["status"] < 300 for r in seen),
           [f"{r['method']} {r['path']} {r['status']}" for r in seen])  # fmt: skip
    _check(checks, "no request left LSMT's origin", not recorder.refused, recorder.refused)
    result["translate_content_types"] = translate_types
    result["paths_called"] = sorted({f"{r['method']} {r['path']}" for r in seen})
    result["page_files_served"] = sorted(set(recorder.served))
    return result


def translate_file(page: Any, recorder: Recorder, args: argparse.Namespace) -> dict[str, Any]:
    """The page's "Translate Files": a .txt of the sentence, the Translate button, the file
    the page has the browser download (LSMT's download name: the original's) and its link."""
    page.get_by_role("button", name="Translate Files").click()
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "sentence.txt"
        file.write_text(args.text + "\n")
        page.set_input_files("input[type=file]", str(file))
        page.locator(".file-dropzone button.btn", has_text="Translate").click()
        page.wait_for_function(
            "() => { const a = window._vueApp; return a.translatedFileUrl !== false "
            "|| a.error !== ''; }",
            timeout=TIMEOUT_MS,
        )
    state = _state(page)
    link = page.locator(".file-dropzone a.btn", has_text="Download")
    href = link.get_attribute("href") if link.count() else None
    text = httpx.get(href, timeout=30).text if href else ""
    for _ in range(100):  # the page clicks the link itself once the answer is in
        if recorder.downloads:
            break
        page.wait_for_timeout(100)
    ok = (state["error"] == "" and bool(href) and text.strip() not in ("", args.text)
          and recorder.downloads == ["sentence.txt"])  # fmt: skip
    return {"ok": ok, "error": state["error"], "download_link": href,
            "browser_downloaded": recorder.downloads, "translated": text.strip()}  # fmt: skip


def machine() -> str:
    model = ""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next(ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines()
                     if ln.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {model or platform.processor()}, {platform.platform()}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--libretranslate", type=Path, default=None,
                   help="the installed package's folder (default: runs/peer-venv's)")  # fmt: skip
    p.add_argument("--python", type=Path, default=None,
                   help="the Python that renders the page (default: its venv's)")  # fmt: skip
    p.add_argument("--text", default=TEXT, help="the English sentence typed")
    p.add_argument("--target", default="es", help="the target language picked")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "lt-front-end")
    args = p.parse_args(argv)
    package = args.libretranslate or default_package()
    if package is None or not (package / "templates" / "app.js.template").is_file():
        sys.exit("no libretranslate package: pass --libretranslate (python -m loadtests.peer "
                 "installs one in runs/peer-venv)")  # fmt: skip
    python = args.python or package_python(package)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with ServerProcess([args.bundle]) as server:
        settings = httpx.get(f"{server.url}/frontend/settings", timeout=30).json()
        page_dir = args.out / "page"
        version = render_page(package, python, page_dir, bool(settings.get("apiKeys")))
        recorder = Recorder(server.url, page_dir, package / "static")
        result = drive(server.url, recorder, args)
    with ServerProcess([args.bundle], {"LSMT_API_KEYS": KEY}) as server:
        keyed_settings = httpx.get(f"{server.url}/frontend/settings", timeout=30).json()
        keyed_dir = args.out / "page-keys"  # its key button shown, as LibreTranslate would
        render_page(package, python, keyed_dir, bool(keyed_settings.get("apiKeys")))
        keyed = drive_keyed(server.url, Recorder(server.url, keyed_dir, package / "static"), args)
    result["checks"] += keyed.pop("checks")
    result["keys"] = {"frontend_settings": keyed_settings, **keyed}
    result = {
        "command": "python -m loadtests.lt_front_end " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "libretranslate": {"version": version, "package": str(package)},
        "bundle": str(args.bundle),
        "frontend_settings": settings,
        "seconds": round(time.perf_counter() - started, 1),
        **result,
    }
    result["passed"] = print_checks(result["checks"])
    rows = [{**c, "detail": json.dumps(c["detail"], ensure_ascii=False)[:300]}
            for c in result["checks"]]  # fmt: skip
    json_path, _ = write_results(args.out, result, rows, name="lt_front_end")
    print(f"-> {json_path}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
