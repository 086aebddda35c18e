"""The translation page at ``/`` in a real headless Chromium (Debian's ``chromium``, driven by
Playwright), against a real server on loopback with the real tiny bundle.

One browser and one server for the module (a second, small one for API keys). The browser is
installed by ``make test``; where none can be started the tests are skipped with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from loadtests.chromium import CHROMIUM_ARGS, find_chromium
from server.documents import FORMATS
from tests.server.conftest import GERMAN

pytestmark = pytest.mark.integration

EN = "And Jesus said unto them, Follow me."
FR = "Et Jésus leur dit: Suivez-moi."
DE = "Und Jesus sprach zu ihnen: Folgt mir nach."
MAX_CHARS = 300
KEY = "page-test-key"
# Engine loads take this much longer than they would, so the page's "loading" state lasts long
# enough to be seen; translating itself is not slowed.
LOAD_DELAY_S = 1.5


def _slow_load(bundle, route, settings):
    from server.engine_loader import default_loader

    time.sleep(LOAD_DELAY_S)
    return default_loader(bundle, route, settings)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = find_chromium()
    if path is None:
        pytest.skip(
            "no Chromium to drive: install Debian's chromium (make test does where apt-get "
            "works) or set LSMT_TEST_CHROMIUM"
        )
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, timeout=60_000)
    except Exception as exc:
        pw.stop()
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        pytest.skip(f"Chromium at {path} could not be started: {reason}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="module")
def srv(module_server):
    s = module_server(loader=_slow_load, warmup_routes=["en-de"], max_chars_per_text=MAX_CHARS)
    assert s.wait_ready()["ready"]
    return s


@pytest.fixture(scope="module")
def keyed(module_server):
    return module_server(api_keys=[KEY])


@pytest.fixture
def api(srv) -> Iterator[httpx.Client]:
    with srv.client() as c:
        yield c


@pytest.fixture
def new_page(browser) -> Iterator[Callable[..., Page]]:
    """new_page(**context options) -> a page in a fresh context (own local storage). At the
    end of the test: no script error was raised and nothing was asked of another origin."""
    contexts, errors, urls = [], [], []

    def make(**context) -> Page:
        ctx = browser.new_context(**{"viewport": {"width": 1100, "height": 800}, **context})
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda req: urls.append(req.url))
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert errors == []
    assert urls and all(u.startswith("http://127.0.0.1:") for u in urls), urls


@pytest.fixture
def page(new_page) -> Page:
    return new_page()


def open_page(page: Page, server) -> Page:
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready=true]")
    return page


def pick(page: Page, source: str, target: str) -> None:
    page.select_option("#source", source)
    page.select_option("#target", target)


def options(page: Page, select: str) -> list[str]:
    return page.eval_on_selector_all(f"{select} option", "os => os.map(o => o.value)")


def api_translate(client: httpx.Client, **body) -> dict:
    r = client.post("/v1/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["translations"][0]


def output_of(page: Page) -> str:
    """The translation, once the request has finished."""
    expect(page.locator("#translate")).to_have_text("Translate")
    out = page.locator("#output").text_content()
    assert out, page.locator("#error").text_content()
    return out


# Serving ------------------------------------------------------------------------------------


def test_page_and_assets_are_served(api):
    r = api.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert 'src="web/app.js"' in r.text and 'href="web/style.css"' in r.text
    js, css = api.get("/web/app.js"), api.get("/web/style.css")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert api.head("/").status_code == 200
    assert api.get("/web/nothing.js").json()["error"]["code"] == "not_found"


def test_switched_off_page_is_not_found(make_server, monkeypatch):
    from server.settings import Settings

    monkeypatch.setenv("LSMT_WEB_PAGE", "false")
    assert Settings().web_page is False
    off = make_server(web_page=False)
    with off.client() as c:
        for path in ("/", "/web/app.js"):
            r = c.get(path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
        assert c.get("/v1/languages").status_code == 200


# The page ----------------------------------------------------------------------------------


def test_pickers_hold_only_the_servers_routes(page, srv, api):
    catalogue = api.get("/v1/languages").json()
    open_page(page, srv)
    targets = {lang["code"]: lang["targets"] for lang in catalogue["languages"]}
    assert options(page, "#source") == ["auto", *[c for c, t in targets.items() if t]]
    for code, expected in targets.items():
        page.select_option("#source", code)
        assert options(page, "#target") == expected, code
    page.select_option("#source", "auto")
    assert options(page, "#target") == sorted({r.split("-")[1] for r in catalogue["routes"]})
    # Labelled for screen readers, and "German (de)" rather than a bare code.
    for control in ("source", "target", "text", "api-key", "num-alternatives"):
        assert page.locator(f"label[for={control}]").count() == 1, control
    page.select_option("#source", "en")
    assert page.locator("#target option[value=de]").text_content() == "German (de)"


def test_translate_button_matches_the_api(page, srv, api, tmp_path):
    open_page(page, srv)
    pick(page, "en", "de")
    # en-de was warmed up at start.
    expect(page.locator("#engine [data-state]")).to_have_attribute("data-state", "ready")
    page.fill("#text", EN)
    page.click("#translate")
    assert output_of(page) == api_translate(api, text=EN, source="en", target="de")["text"]
    assert page.locator("#error").is_hidden() and page.locator("#detected").is_hidden()
    assert page.locator("#output").get_attribute("lang") == "de"
    page.screenshot(path=tmp_path / "web_page.png", full_page=True)
    assert (tmp_path / "web_page.png").stat().st_size > 10_000


def test_glossary_box_and_a_file(page, srv, tmp_path):
    """The glossary box reaches the translation (and a malformed line is said, not sent); a
    file picked on the page comes back translated with its layout, ready to download."""
    open_page(page, srv)
    pick(page, "en", "de")
    page.click("#glossary-box summary")
    page.fill("#glossary", "fishers = Fischer\nJesus")
    page.fill("#text", "And Jesus said unto them, Follow me, and I will make you fishers of men.")
    page.click("#translate")
    out = output_of(page)
    assert "Fischer" in out and "Jesus" in out, out
    page.fill("#glossary", " = Fischer")
    page.click("#translate")
    expect(page.locator("#error")).to_contain_text("Glossary line 1")
    page.fill("#glossary", "Jesus")
    page.click("#files summary")
    assert page.locator("#file").get_attribute("accept") == ",".join(FORMATS)
    srt = tmp_path / "film.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nAnd Jesus said unto them, Follow me.\n")
    page.set_input_files("#file", str(srt))
    page.click("#translate-file")
    link = page.locator("#file-link")
    expect(link).to_be_visible()
    got = httpx.get(link.get_attribute("href"), timeout=30)
    assert got.status_code == 200, got.text
    assert got.text.startswith("1\n00:00:01,000 --> 00:00:02,000\n") and "Jesus" in got.text
    assert "Follow me" not in got.text


def test_ctrl_enter_translates(page, srv, api):
    open_page(page, srv)
    pick(page, "fr", "de")
    page.fill("#text", FR)
    page.press("#text", "Control+Enter")
    assert output_of(page) == api_translate(api, text=FR, source="fr", target="de")["text"]


def test_auto_shows_the_detected_language_and_confidence(page, srv, api):
    open_page(page, srv)
    pick(page, "auto", "de")
    assert page.locator("#swap").is_disabled()  # the source language is not known yet
    page.fill("#text", EN)
    page.click("#translate")
    expected = api_translate(api, text=EN, source="auto", target="de")
    assert output_of(page) == expected["text"]
    lang, conf = expected["detected"]["language"], expected["detected"]["confidence"]
    assert lang == "en"
    percent = math.floor(conf * 100 + 0.5)
    expect(page.locator("#detected")).to_be_visible()
    expect(page.locator("#detected")).to_have_text(
        f"Detected language: English (en), confidence {percent}%."
    )
    assert page.locator("#swap").is_enabled()  # now it is: en


def test_auto_text_already_in_the_target_is_said_so(page, srv):
    open_page(page, srv)
    pick(page, "auto", "de")
    page.fill("#text", DE)
    page.click("#translate")
    assert output_of(page) == DE
    expect(page.locator("#detected")).to_be_visible()
    expect(page.locator("#detected")).to_contain_text("already in the target language")


def test_over_long_text_shows_the_apis_message(page, srv, api):
    text = "Follow me. " * (MAX_CHARS // 10)
    r = api.post("/v1/translate", json={"text": text, "source": "en", "target": "de"})
    assert r.status_code == 413
    message = r.json()["error"]["message"]
    open_page(page, srv)
    pick(page, "en", "de")
    page.fill("#text", text)
    page.click("#translate")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_have_text(message)
    assert page.locator("#error").get_attribute("role") == "alert"
    assert page.locator("#output").text_content() == ""
    expect(page.locator("#translate")).to_be_enabled()


def test_a_language_not_served_shows_the_apis_message(page, srv, api):
    text = "駅はどこですか。コーヒーを飲みたいです。"
    r = api.post("/v1/translate", json={"text": text, "source": "auto", "target": "de"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_language"
    open_page(page, srv)
    pick(page, "auto", "de")
    page.fill("#text", text)
    page.click("#translate")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_have_text(r.json()["error"]["message"])
    assert page.locator("#output").text_content() == ""


def test_an_uncertain_source_is_shown_as_a_warning(page, srv, api):
    assert api_translate(api, text="Hello", source="auto", target="de")["warnings"] == [
        "uncertain_language"
    ]
    open_page(page, srv)
    pick(page, "auto", "de")
    page.fill("#text", "Hello")
    page.click("#translate")
    assert output_of(page)
    expect(page.locator("#warnings")).to_be_visible()
    expect(page.locator("#warnings")).to_contain_text("not identified with confidence")
    # A translation without warnings hides the note again.
    page.fill("#text", EN)
    page.click("#translate")
    assert output_of(page)
    expect(page.locator("#warnings")).to_be_hidden()


def test_alternatives_when_asked(page, srv, api):
    open_page(page, srv)
    pick(page, "en", "de")
    page.fill("#text", EN)
    page.fill("#num-alternatives", "2")
    page.click("#translate")
    expected = api_translate(api, text=EN, source="en", target="de", num_alternatives=2)
    assert output_of(page) == expected["text"]
    expect(page.locator("#alternatives-list")).to_be_visible()
    items = page.locator("#alternatives-list li").all_text_contents()
    assert items == [a["text"] for a in expected["alternatives"]] and len(items) == 2


def test_engine_state_goes_cold_loading_ready(page, srv, api):
    # Only this test uses a route into fr, so its engine is cold until here.
    engines = {e["key"]: e["state"] for e in api.get("/v1/models").json()["engines"]}
    assert engines["tiny:shared+tgt/fr"] == "unloaded"
    open_page(page, srv)
    pick(page, "de", "fr")
    state = page.locator("#engine [data-state]")
    expect(state).to_have_attribute("data-state", "cold")
    expect(page.locator("#engine")).to_contain_text("German (de) → French (fr)")
    page.fill("#text", DE)
    page.click("#translate")
    expect(state).to_have_attribute("data-state", "loading")
    expect(state).to_have_attribute("data-state", "ready")
    assert output_of(page)


def test_swap_exchanges_languages_and_texts(page, srv):
    open_page(page, srv)
    pick(page, "en", "de")
    page.fill("#text", EN)
    page.click("#translate")
    translated = output_of(page)
    page.click("#swap")
    assert page.input_value("#source") == "de" and page.input_value("#target") == "en"
    assert page.input_value("#text") == translated
    assert page.locator("#output").text_content() == ""


def test_copy_button_copies_the_translation(new_page, srv):
    page = open_page(new_page(permissions=["clipboard-read", "clipboard-write"]), srv)
    pick(page, "en", "de")
    page.fill("#text", EN)
    page.click("#translate")
    translated = output_of(page)
    page.click("#copy")
    expect(page.locator("#copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == translated


def test_api_key_field(page, keyed):
    body = {"text": EN, "source": "en", "target": "de"}
    with keyed.client() as c:
        missing = c.post("/v1/translate", json=body)
        wrong = c.post("/v1/translate", json=body, headers={"X-API-Key": "wrong"})
        right = c.post("/v1/translate", json=body, headers={"X-API-Key": KEY})
    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 403, 200)
    open_page(page, keyed)  # the catalogues stay open: the pickers fill without a key
    pick(page, "en", "de")
    page.fill("#text", EN)
    page.click("#translate")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_have_text(missing.json()["error"]["message"])
    # The key field is shown and focused for the user.
    expect(page.locator("#api-key")).to_be_focused()
    page.fill("#api-key", "wrong")
    page.click("#translate")
    expect(page.locator("#error")).to_have_text(wrong.json()["error"]["message"])
    page.fill("#api-key", KEY)
    page.click("#translate")
    assert (
        output_of(page) == right.json()["translations"][0]["text"]
        and page.locator("#error").is_hidden()
    )
    # Kept in local storage: there after a reload.
    open_page(page, keyed)
    assert page.input_value("#api-key") == KEY


def test_phone_width_has_no_horizontal_overflow(new_page, srv, tmp_path):
    page = open_page(new_page(viewport={"width": 360, "height": 740}, is_mobile=True), srv)
    pick(page, "en", "de")
    page.fill("#text", EN)
    page.click("#translate")
    output_of(page)
    width = page.evaluate("document.documentElement.clientWidth")
    assert width == 360
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for sel in ("#source", "#target", "#swap", "#text", "#output", "#translate", "#copy"):
        box = page.locator(sel).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, sel
    page.screenshot(path=tmp_path / "web_page_phone.png", full_page=True)


def test_failed_engine_shows_the_apis_message_and_state(page, make_server, bundle_copy):
    # A damaged module: its engine fails to load (503 engine_unavailable, Retry-After).
    module = bundle_copy / "modules" / "tgt" / "fr.safetensors"
    module.write_bytes(b"\xff" * 64 + module.read_bytes()[64:])
    broken = make_server(bundle_dirs=[bundle_copy], load_retry_initial_s=30)
    open_page(page, broken)
    pick(page, "de", "fr")
    page.fill("#text", DE)
    page.click("#translate")
    expect(page.locator("#error")).to_be_visible()
    with broken.client() as c:
        r = c.post("/v1/translate", json={"text": DE, "source": "de", "target": "fr"})
        engines = {e["key"]: e for e in c.get("/v1/models").json()["engines"]}
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    message = r.json()["error"]["message"]
    shown = page.locator("#error").text_content()
    assert shown.startswith(message) and "Try again in" in shown, (shown, message)
    expect(page.locator("#engine [data-state]")).to_have_attribute("data-state", "failed")
    expect(page.locator("#engine")).to_contain_text(engines["tiny:shared+tgt/fr"]["error"])


def test_a_pair_without_a_route_is_translated_through_a_pivot(
    new_page, module_server, bundle_without_de_fr
):
    server = module_server(bundle_dirs=[bundle_without_de_fr])
    server.wait_ready()
    page = open_page(new_page(), server)
    pick(page, "de", "fr")
    expect(page.locator("#engine")).to_contain_text("Through English (en).")
    assert page.locator("#engine [data-state]").count() == 2  # one engine per leg
    page.fill("#text", GERMAN)
    page.click("#translate")
    with server.client() as c:
        expected = api_translate(c, text=GERMAN, source="de", target="fr")
    assert expected["pivot"] == "en"
    assert output_of(page) == expected["text"]
    expect(page.locator("#detected")).to_have_text(
        "Translated through English (en): no model translates this pair directly."
    )


def test_a_route_served_by_an_argos_package_says_so(new_page, module_server, argos_zips):
    server = module_server(bundle_dirs=[argos_zips])
    server.wait_ready()
    page = open_page(new_page(), server)
    pick(page, "en", "fr")
    expect(page.locator("#engine")).to_contain_text(
        "Engine English (en) → French (fr) (Argos package default-en_fr 1.0):"
    )
    page.fill("#text", "Where is the train station?")
    page.click("#translate")
    with server.client() as c:
        expected = api_translate(c, text="Where is the train station?", source="en", target="fr")
    assert output_of(page) == expected["text"] and expected["text"].strip()
