"""The HTML audit page, made from a real run and read as a reviewer and a browser would.

The run (fake model, real dev server, as in `test_audit.py`) writes a big file under approval,
receives a live message while it waits, and reads a tool output that carries a `<script>`. The
page must lead with the summary, show every record once, fold what is long, name both
identities of each decision, and show the hostile text as text: checked by parsing the page in
Python and by loading it in headless Chromium (Debian's `chromium`), whose DOM must keep its
title. Set CAPSTAN_WRITE_SCREENSHOT=1 to refresh docs/audit-page.png from this run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from capstan.audit.display import utc
from capstan.audit.history import decode_history, load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail, canonical, verify_chain
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = "<script>document.title='pwned'</script>"
NOTES = "".join(f"line {i}: figures for week {i} are in\n" for i in range(1, 201)) + HOSTILE
SUMMARY = "".join(f"week {i}: in\n" for i in range(1, 501))
SCRIPT = [
    say(call("list_dir"), content="Let me see what the workspace holds.", reasoning="Look first."),
    say(call("read_file", path="notes.txt"), content="Reading the notes."),
    say(
        call("write_file", path="summary.txt", content=SUMMARY + HOSTILE),
        content="Writing the summary. " + HOSTILE,
    ),
    say(call("finish", answer="Wrote summary.txt from notes.txt."), content="Done."),
]
TASK = "Summarise notes.txt into summary.txt"


@dataclass
class Audited:
    run_id: str
    records: list[dict[str, Any]]
    issues: list[str]
    page: str


@pytest.fixture(scope="module")
async def audited(
    temporal: Client, dev_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Audited:
    """One real run for the whole module (settings as conftest's `settings` builds them)."""
    tmp = tmp_path_factory.mktemp("audit-page")
    settings = Settings(
        data_dir=tmp / "data",
        temporal_address=dev_server.address,
        task_queue=f"tq-{uuid.uuid4().hex[:10]}",
        identity="tester@ci",
    )
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    (settings.workspace_dir / "notes.txt").write_text(NOTES)
    agent = Agent(temporal, settings)
    async with agent.serving(SCRIPT) as live:
        run_id = await live.start(agent.spec(TASK))
        await wait_pending(live.client, run_id)
        await live.client.send_message(run_id, "keep the week numbers", "m1")
        await live.client.decide(run_id, "approve", reason="the summary looks right")
        run = await live.finish(run_id)
    histories = await load_histories(temporal, run_id)
    records, issues = build_trail([decode_history(h) for h in histories], run.client.content())
    return Audited(run.run_id, records, issues, render_trail(records, issues, "html"))


class _Dom(HTMLParser):
    """The page as a browser's parser sees it: elements in order, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Dom:
    dom = _Dom()
    dom.feed(page)
    return dom


def ids(dom: _Dom) -> list[str]:
    return [str(a["id"]) for _, a in dom.tags if a.get("id")]


@pytest.mark.server
async def test_summary_leads_and_every_record_follows_once(audited: Audited) -> None:
    page, records = audited.page, audited.records
    assert audited.issues == [] and verify_chain(records) == []
    dom = parse(page)
    order = ids(dom)
    sections = [a["id"] for tag, a in dom.tags if tag == "section"]
    assert sections == [f"r{r['seq']}" for r in records]  # each record once, in order
    assert order.index("summary") < order.index("r0") < order.index("spec")  # spec last
    summary = page[: page.index('id="r0"')]
    spec = audited.records[0]["spec"]
    for fact in (spec["run_id"], TASK, "completed", "The record verifies", records[-1]["hash"]):
        assert fact in summary, fact
    assert '"tool_policy"' not in summary  # the spec is folded at the end, not on top
    assert re.search(r"<details class=card><summary>The RunSpec", page[page.index("id=spec") :])
    (decision,) = [r for r in records if r["kind"] == "decision"]
    approvals = summary[summary.index("<h2>Approvals</h2>") :]
    assert "tester@ci" in approvals and decision["client"] in approvals  # both identities
    assert "the summary looks right" in approvals and "Two identities" in summary
    assert utc(records[0]["time"]) in summary and utc(records[0]["time"]).endswith(" UTC")
    steps = [a["id"] for _, a in dom.tags if str(a.get("id", "")).startswith("step-")]
    assert steps == ["step-1", "step-2", "step-3", "step-4"]


@pytest.mark.server
async def test_arguments_read_as_arguments_and_long_outputs_fold(audited: Audited) -> None:
    page = audited.page
    assert "<th>path</th>" in page and "<th>content</th>" in page  # parsed, one row each
    assert "&quot;path&quot;" not in page  # never JSON escaped inside the page
    assert "week 2: in\nweek 3: in" in "".join(parse(page).text)  # lines read as lines
    read = next(r for r in audited.records if r["kind"] == "tool_call" and r["tool"] == "read_file")
    section = page[page.index(f'id="r{read["seq"]}"') :]
    section = section[: section.index("</section>")]
    assert "<details" in section and f"{len(read['result']):,} characters" in section
    model = page[page.index("live message delivered") - 400 :]
    assert "keep the week numbers" in model[:1000]  # marked where the model read it


@pytest.mark.server
async def test_hostile_output_renders_as_text(audited: Audited) -> None:
    dom = parse(audited.page)
    assert [t for t, _ in dom.tags if t in ("script", "iframe", "img", "link", "object")] == []
    assert "".join(dom.text).count(HOSTILE) >= 3  # thought, arguments, observation
    assert HOSTILE not in audited.page and "&lt;script&gt;" in audited.page


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)


def title(dom_text: str) -> str:
    found = re.search(r"<title>(.*?)</title>", dom_text, re.S)
    return found.group(1) if found else ""


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium not installed at /usr/bin/chromium (apt-get install chromium)",
)


@pytest.mark.server
@needs_chromium
async def test_page_in_headless_chromium(audited: Audited, tmp_path: Path) -> None:
    page = tmp_path / "audit.html"
    page.write_text(audited.page, encoding="utf-8")
    profile = tmp_path / "chromium"
    dumped = await asyncio.to_thread(chromium, "--dump-dom", f"file://{page}", profile=profile)
    dom = dumped.stdout
    assert title(dom) == f"Capstan audit · {audited.records[0]['spec']['run_id']}"  # no script ran
    assert dom.index("The record verifies") < dom.index('id="r0"') < dom.index('id="spec"')
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # shown, as text
    shot = tmp_path / "audit.png"
    await asyncio.to_thread(
        chromium,
        f"--screenshot={shot}",
        "--window-size=1280,1400",
        f"file://{page}",
        profile=profile,
    )
    assert png_size(shot) == (1280, 1400)
    if os.environ.get("CAPSTAN_WRITE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / "audit-page.png")


@pytest.mark.server
@needs_chromium
async def test_scripts_would_not_run_even_if_escaping_failed(
    audited: Audited, tmp_path: Path
) -> None:
    """The page's Content-Security-Policy is a second line: a script slipped into the page
    stays inert. The control page (no policy) shows the check can see a script run."""
    profile = tmp_path / "chromium"
    injected = tmp_path / "injected.html"
    injected.write_text(audited.page.replace("</main>", HOSTILE + "</main>"), encoding="utf-8")
    control = tmp_path / "control.html"
    control.write_text(f"<!doctype html><title>control</title>{HOSTILE}", encoding="utf-8")
    for path, expected in ((control, "pwned"), (injected, None)):
        dumped = await asyncio.to_thread(chromium, "--dump-dom", f"file://{path}", profile=profile)
        assert title(dumped.stdout) == (expected or title(audited.page))


def long_run(steps: int, observation_chars: int) -> list[dict[str, Any]]:
    """A trail of `steps` steps with big observations, chained as `build_trail` chains."""
    base = {"time": "2026-01-01T00:00:00", "run": "r1"}
    bodies: list[dict[str, Any]] = [
        {"kind": "run_started", "spec": {"run_id": "long", "task": "t"}}
    ]
    for step in range(1, steps + 1):
        args = json.dumps({"path": f"f{step}.txt"})
        bodies.append(
            {
                "kind": "model_call",
                "step": step,
                "usage": {"input_tokens": 1000, "output_tokens": 50, "cost_usd": 0.001},
                "response": {
                    "text": f"step {step}",
                    "tool_calls": [{"id": f"c{step}", "name": "read_file", "arguments": args}],
                },
            }
        )
        output = (f"row {step} " * observation_chars)[:observation_chars] + HOSTILE
        bodies.append(
            {
                "kind": "tool_call",
                "step": step,
                "call_id": f"c{step}",
                "tool": "read_file",
                "arguments": args,
                "outcome": "succeeded",
                "duration_ms": 3,
                "result": output,
            }
        )
    bodies.append({"kind": "run_ended", "terminal_reason": "completed", "steps": steps})
    records, prev = [], ""
    for body in bodies:
        rec = {"seq": len(records), **base, **body, "prev": prev}
        rec["hash"] = prev = hashlib.sha256((prev + canonical(rec)).encode()).hexdigest()
        records.append(rec)
    return records


def test_a_500_step_run_makes_a_page_of_reasonable_size() -> None:
    records = long_run(500, 50_000)
    raw = render_trail(records, [], "jsonl")
    page = render_trail(records, [], "html")
    assert len(raw) > 25_000_000  # 25 MB of record ...
    assert len(page) < 3_000_000  # ... read in under 3 MB: big observations clipped and folded
    dom = parse(page)
    assert sum(1 for t, _ in dom.tags if t == "section") == len(records)
    assert sum(1 for t, _ in dom.tags if t == "details") >= 500
    assert "script" not in [t for t, _ in dom.tags] and "characters not shown" in page
    assert "The record verifies" in page and "500" in page[: page.index('id="r0"')]
    assert [json.loads(line) for line in raw.splitlines()] == records  # jsonl is the record


def test_markdown_leads_with_the_summary() -> None:
    records = long_run(3, 100)
    md = render_trail(records, [], "md")
    assert md.startswith("# Audit of run `long`") and "| Outcome | completed |" in md
    assert md.index("| Steps | 3 |") < md.index("## 0. run started")
    assert '"path": "f1.txt"' in md  # arguments pretty-printed, not JSON inside JSON


def test_a_trail_that_does_not_verify_says_so_on_top() -> None:
    records = long_run(2, 10)
    records[2] = {**records[2], "result": "edited after the fact"}
    page = render_trail(records, ["tool_call at t: blob 00ff: altered"], "html")
    summary = page[: page.index('id="r0"')]
    assert "The record does not verify: 2 problems" in summary and "2 problems" in summary
    assert "record 2 (tool_call): content does not match its hash" in summary
    assert "blob 00ff: altered" in summary and "The record verifies" not in page
