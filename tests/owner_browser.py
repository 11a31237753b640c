"""Drives the ask server's owner page in a real browser (Debian's chromium through Playwright
for Python; no browser is ever downloaded). Started by tests/owner_page.rs with the URL that
`peer ask serve` printed and the question the test is about to ask. It opens the page, says
"page open" on stdout, waits for the ask to appear live (over the page's event stream),
checks that the question shows as text and that no script in it ran, clicks Approve, and waits
for the ask to leave the page. Exit 0 and "approved" on success. With PEER_OWNER_SCREENSHOT
set, it saves a screenshot of the page with the ask on it there."""

import os
import sys

from playwright.sync_api import sync_playwright

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main() -> int:
    url, question = sys.argv[1], sys.argv[2]
    browser_path = os.environ.get("PEER_BROWSER", "/usr/bin/chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=ARGS)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        # The secret left the address bar for an HttpOnly cookie script cannot read.
        assert page.url.endswith("/owner"), page.url
        assert "secret" not in page.evaluate("document.cookie"), "cookie readable by script"
        page.wait_for_selector("#live:not(.off)", timeout=20_000)
        print("page open", flush=True)
        card = page.locator("#asks li[data-ask-id]")
        card.first.wait_for(timeout=60_000)
        shown = card.first.locator(".question").inner_text()
        assert shown == question, f"question shown as {shown!r}"
        assert page.evaluate("window.__pwned === undefined"), "a script from the question ran"
        assert "pwned" not in page.title(), page.title()
        assert page.locator("#asks img, #asks script").count() == 0, "markup from a friend"
        assert card.first.locator(".who").inner_text() == "ada"
        shot = os.environ.get("PEER_OWNER_SCREENSHOT")
        if shot:
            page.screenshot(path=shot, full_page=True)
        card.first.locator("button[data-decision=approve]").click()
        page.wait_for_selector("#asks li[data-ask-id]", state="detached", timeout=30_000)
        status = page.locator("#status").inner_text()
        assert status.startswith("approve"), status
        assert not errors, errors
        browser.close()
    print("approved", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
