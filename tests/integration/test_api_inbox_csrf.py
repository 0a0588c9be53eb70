"""Login CSRF in a real browser (Debian's chromium, driven by Playwright): a page on another site
that posts the sign-in form with the attacker's token must not sign the browser in, while the
inbox's own sign-in form still does, with a SameSite=Lax, HttpOnly cookie."""

from __future__ import annotations

import pytest

from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, MALLORY, app_for, served
from tests.integration.test_api_inbox import ARGS, CHROMIUM, sign_in

playwright = pytest.importorskip("playwright.async_api")

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed at /usr/bin/chromium"),
]

EVIL = "http://evil.test/"


def attack(base: str) -> str:
    """The attacker's page: a form that signs whoever opens it in with the attacker's token."""
    return f"""<!doctype html><html><body>
<form method="post" action="{base}/login"><input name="token" value="{MALLORY}"></form>
<script>document.forms[0].submit()</script></body></html>"""


async def test_another_sites_form_cannot_sign_the_browser_in(agent: Agent) -> None:
    async with served(app_for(agent.client)) as base, playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context()
            page = await context.new_page()

            async def evil(route: playwright.Route) -> None:
                await route.fulfill(body=attack(base), content_type="text/html")

            await context.route(f"{EVIL}**", evil)
            async with page.expect_response(f"{base}/login") as posted:
                await page.goto(EVIL)
            assert (await posted.value).status == 403
            assert not [c for c in await context.cookies(base) if c["name"] == "capstan_token"]
            await page.goto(f"{base}/")
            assert page.url == f"{base}/login"  # not signed in, as Mallory or anyone
            # the inbox's own form signs in
            mine = await sign_in(browser, base, ALICE)
            assert "alice@acme" in await mine.locator("header").inner_text()
            (cookie,) = [
                c for c in await mine.context.cookies(base) if c["name"] == "capstan_token"
            ]
            assert cookie["sameSite"] == "Lax" and cookie["httpOnly"]
            # and signs out with its own form
            await mine.get_by_role("button", name="sign out").click()
            await mine.wait_for_url(f"{base}/login")
            assert not [c for c in await mine.context.cookies(base) if c["name"] == "capstan_token"]
        finally:
            await browser.close()
