"""The inbox in a real browser (Debian's chromium, driven by Playwright): a reviewer signs in,
sees a pending write with its diff, edits it (an invalid edit is caught on the page), approves
by keyboard, and watches the run finish on its page; a second reviewer's inbox drops the request
live. Set CAPSTAN_WRITE_SCREENSHOT=1 to refresh docs/inbox.png from this run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import httpx
import pytest

from capstan.core.spec import TerminalReason
from capstan.core.tenants import workspace_subdir
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ALICE, ROOT, app_for, auth, body_of, served

playwright = pytest.importorskip("playwright.async_api")

ROOT_DIR = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
NOTES = "# Weekly notes\n\n- revenue is up\n- hiring paused\n"
DRAFT = "# Weekly notes\n\n- revenue is up 4%\n- hiring paused\n- ship the inbox\n"
EDITED = "# Weekly notes\n\n- revenue is up 4% (checked)\n- hiring paused\n"

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed at /usr/bin/chromium"),
]


async def sign_in(browser: playwright.Browser, base: str, token: str) -> playwright.Page:
    page = await (await browser.new_context(viewport={"width": 1200, "height": 900})).new_page()
    await page.goto(f"{base}/")
    await page.get_by_label("API token").fill(token)
    await page.get_by_label("API token").press("Enter")
    await page.wait_for_url(f"{base}/")
    return page


DELIVERED = re.compile(r"^(Applied\.|Sent: the run takes it at its next step\.)$")


async def test_review_a_write_in_the_browser(agent: Agent, workspace: Path, tmp_path: Path) -> None:
    workspace = workspace / workspace_subdir("acme")  # the tenant's own (capstan.core.tenants)
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text(NOTES)
    script = [
        say(call("write_file", path="notes.md", content=DRAFT), content="Updating the notes."),
        say(call("finish", answer="notes updated"), hold=1.5),
    ]
    async with (
        agent.serving(script) as live,
        served(app_for(live.client)) as base,
        playwright.async_playwright() as pw,
    ):
        async with httpx.AsyncClient(base_url=base) as http:
            body = body_of(agent.spec("Update the weekly notes"))
            r = await http.post("/api/runs", json=body, headers=auth(ALICE))
            run_id = r.json()["run_id"]
        await wait_pending(live.client, run_id)
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            reviewer = await sign_in(browser, base, ALICE)
            other = await sign_in(browser, base, ROOT)
            card = reviewer.locator("article[data-key]").filter(has_text="write_file")
            await card.wait_for()
            diff = await card.locator("pre").nth(2).inner_text()
            assert "-- revenue is up" in diff and "+- revenue is up 4%" in diff
            assert "Why asked:" in await card.inner_text()
            shot = tmp_path / "inbox.png"
            await reviewer.screenshot(path=str(shot), full_page=False)
            edit = card.get_by_label("Arguments to run with")
            await edit.fill("{not json")
            await card.get_by_role("button", name="Approve with edits").press("Enter")
            await card.get_by_text("not valid JSON").wait_for()
            await edit.fill(json.dumps({"path": "notes.md", "content": EDITED}, indent=2))
            # hold the API's reply until the decision has reached both inboxes live: the
            # reviewer's own card must outlive its request to show the reply (on a loaded
            # machine the SSE event can beat the POST's response)
            released = asyncio.Event()

            async def hold_reply(route: playwright.Route) -> None:
                response = await route.fetch()
                await released.wait()
                await route.fulfill(response=response)

            await reviewer.route("**/approve", hold_reply)
            await card.get_by_role("button", name="Approve with edits").press("Enter")
            # the second reviewer's inbox drops the request, live
            await other.locator("article[data-key]").first.wait_for(
                state="detached", timeout=20_000
            )
            await reviewer.locator("article.closed[data-key]").wait_for()
            assert await card.get_by_role("button", name="Approve with edits").is_disabled()
            released.set()
            # applied through the validated update; on a loaded machine the update may outlast
            # the API's wait and go as a signal instead, which the card says just as plainly
            await card.get_by_text(DELIVERED).wait_for()
            await reviewer.goto(f"{base}/runs/{run_id}")
            ending = reviewer.locator("#ending")
            await ending.get_by_text("The run ended: completed.").wait_for(timeout=30_000)
            events = await reviewer.locator("#events li").all_inner_texts()
        finally:
            await browser.close()
        result = await live.client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert (workspace / "notes.md").read_text() == EDITED
    assert any("approval_decided" in e and "alice@acme" in e for e in events), events
    assert "run_ended" in events[-1] and "completed" in events[-1]
    if os.environ.get("CAPSTAN_WRITE_SCREENSHOT") == "1":
        shutil.copy(shot, ROOT_DIR / "docs" / "inbox.png")
