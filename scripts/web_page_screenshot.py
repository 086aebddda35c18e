"""The screenshot in docs/server.md (docs/web_page.png): the web page on the shipped default
model, an everyday sentence translated, in headless Chromium (Debian's, through Playwright, as
tests/server/test_web_page.py drives it). Rerun after changing the page or shipping a model:

    python scripts/web_page_screenshot.py [--out docs/web_page.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.chromium import CHROMIUM_ARGS, find_chromium  # noqa: E402
from loadtests.server_process import ServerProcess  # noqa: E402

TEXT = "Where is the train station? I would like to buy a ticket to Paris."


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "web_page.png")
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="fr")
    args = p.parse_args()
    browser_path = find_chromium()
    if browser_path is None:
        sys.exit("chromium not found: `make test` installs it (Debian's package)")
    with ServerProcess([ROOT / "models" / "default"]) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        page.goto(server.url + "/")
        page.wait_for_selector("body[data-ready=true]")
        page.select_option("#source", args.source)
        page.select_option("#target", args.target)
        page.fill("#text", TEXT)
        page.click("#translate")
        expect(page.locator("#translate")).to_have_text("Translate", timeout=60_000)
        expect(page.locator("#engine [data-state]")).to_have_attribute("data-state", "ready")
        print(page.locator("#output").text_content())
        page.screenshot(path=str(args.out), full_page=True)
        browser.close()
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
