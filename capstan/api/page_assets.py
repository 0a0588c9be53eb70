"""The inbox's style and its one small script, inlined into every page (with a CSP nonce).

No build step and nothing fetched: the script posts decisions to the JSON API (with the
`X-Capstan-Request` header the cookie session needs), follows the SSE streams, and swaps in
server-rendered cards when requests open or close. A card that closes while its reviewer is
acting on it (a decision in flight, or focus inside it) is kept, marked closed, so the answer to
that reviewer's own decision still has somewhere to show — the decision's SSE event can arrive
before the POST's reply on a loaded machine.
"""

from __future__ import annotations

__all__ = ["SCRIPT", "STYLE"]

STYLE = """
:root { color-scheme: light; --ink: #1d232b; --muted: #5b6572; --line: #d5dae1;
  --accent: #1f5fbf; --bad: #a32020; --good: #1d6b35; --bg: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--ink); background: var(--bg); }
header.top { display: flex; gap: 1rem; align-items: baseline; padding: .6rem 1.2rem;
  background: #fff; border-bottom: 1px solid var(--line); }
header.top h1 { font-size: 1.15rem; margin: 0; }
header.top .who { margin-left: auto; color: var(--muted); font-size: .9rem; }
main { max-width: 70rem; margin: 0 auto; padding: 1rem 1.2rem 3rem; }
a { color: var(--accent); }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: .8rem 1rem; margin: 0 0 1rem; }
.card h2 { font-size: 1.05rem; margin: 0 0 .3rem; }
.card h3 { font-size: .9rem; margin: .8rem 0 .3rem; color: var(--muted); }
.meta { margin: .15rem 0; color: var(--muted); font-size: .9rem; }
.meta strong { color: var(--ink); font-weight: 600; }
pre { background: #f1f3f6; border: 1px solid var(--line); border-radius: 6px; padding: .5rem .7rem;
  margin: 0; overflow: auto; max-height: 18rem; font: 13px/1.4 ui-monospace, monospace; }
pre .add { color: var(--good); } pre .del { color: var(--bad); } pre .hunk { color: var(--muted); }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: .8rem; }
@media (max-width: 50rem) { .cols { grid-template-columns: 1fr; } }
label { display: block; font-weight: 600; font-size: .88rem; margin: .6rem 0 .2rem; }
textarea, input[type=text] { width: 100%; font: 13px/1.4 ui-monospace, monospace; padding: .4rem;
  border: 1px solid #9aa3ad; border-radius: 6px; }
.buttons { display: flex; flex-wrap: wrap; gap: .5rem; margin-top: .7rem; }
button { font: inherit; padding: .35rem .8rem; border-radius: 6px; border: 1px solid #7d8893;
  background: #fff; cursor: pointer; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { border-color: var(--bad); color: var(--bad); }
button.link { padding: 0; border: 0; background: none; color: var(--accent);
  text-decoration: underline; cursor: pointer; font-size: inherit; }
button:focus-visible, a:focus-visible, textarea:focus-visible, input:focus-visible {
  outline: 3px solid #f2b705; outline-offset: 1px; }
.result { min-height: 1.2em; margin: .4rem 0 0; font-size: .9rem; }
.result.error { color: var(--bad); } .result.ok { color: var(--good); }
.empty { color: var(--muted); }
.card.closed { opacity: .75; border-style: dashed; }
ol.events { list-style: none; padding: 0; margin: 0; font: 13px/1.5 ui-monospace, monospace; }
ol.events li { padding: .1rem 0; border-bottom: 1px dotted var(--line); }
ol.events .seq { color: var(--muted); display: inline-block; min-width: 3.2em; }
.status-line { font-size: 1rem; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
"""

SCRIPT = r"""
(() => {
  "use strict";
  const live = document.getElementById("announce");
  const say = (text) => { if (live) live.textContent = text; };

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Capstan-Request": "1" },
      body: JSON.stringify(body || {}),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const detail = data.error ? data.error.message : `${response.status} ${response.statusText}`;
      throw new Error(detail);
    }
    return data;
  }

  function editedArguments(card) {
    const text = card.querySelector("textarea[name=arguments]").value;
    let value;
    try { value = JSON.parse(text); } catch (error) {
      throw new Error(`The arguments are not valid JSON: ${error.message}`);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new Error("The arguments must be a JSON object.");
    }
    return value;
  }

  function required(card, name, message) {
    const field = card.querySelector(`[name=${name}]`);
    const value = field ? field.value.trim() : "";
    if (!value) { if (field) field.focus(); throw new Error(message); }
    return value;
  }

  const runOf = (el) => el.closest("[data-run]").dataset.run;
  const api = (el, what) => `/api/runs/${encodeURIComponent(runOf(el))}/${what}`;
  const request = (card) => ({ request_id: card.dataset.request, args_hash: card.dataset.hash });
  const reason = (card) => (card.querySelector("[name=reason]") || { value: "" }).value.trim();

  const actions = {
    approve: (card) => post(api(card, "approve"), { ...request(card), reason: reason(card) }),
    edit: (card) => post(api(card, "approve"),
      { ...request(card), arguments: editedArguments(card), reason: reason(card) }),
    always: (card) => post(api(card, "approve"), { ...request(card), always: true }),
    deny: (card) => post(api(card, "deny"), {
      ...request(card),
      reason: required(card, "reason", "Give a reason to deny: the model reads it."),
    }),
    answer: (card) => post(api(card, "answer"), {
      request_id: card.dataset.request,
      text: required(card, "answer", "Write an answer first."),
    }),
    pause: (box) => post(api(box, "pause"), { reason: reason(box) }),
    resume: (box) => post(api(box, "resume"), {}),
    cancel: (box) => post(api(box, "cancel"), { reason: reason(box) }),
    send: (box) => post(api(box, "send"),
      { text: required(box, "message", "Write a message first.") }),
  };

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-do]");
    if (!button) return;
    const box = button.closest("[data-key], [data-controls]");
    const out = box.querySelector(".result");
    if (box.classList.contains("closed")) return;
    box.dataset.acted = "1";
    out.className = "result";
    out.textContent = "Sending…";
    try {
      const sent = await actions[button.dataset.do](box);
      out.classList.add("ok");
      out.textContent = sent.delivery === "update"
        ? (sent.applied ? "Applied." : `Ignored: ${sent.detail}`)
        : "Sent: the run takes it at its next step.";
      if (button.dataset.do === "send") box.querySelector("[name=message]").value = "";
    } catch (error) {
      out.classList.add("error");
      out.textContent = error.message;
    }
  });

  const list = document.getElementById("requests");

  // keep a card its reviewer is busy with, but make plain it can no longer be decided
  function close(card) {
    card.classList.add("closed");
    for (const control of card.querySelectorAll("button, textarea, input")) control.disabled = true;
    const out = card.querySelector(".result");
    if (out && !card.dataset.acted) {
      out.className = "result";
      out.textContent = "No longer waiting: decided elsewhere, or the run moved on.";
    }
  }

  async function refreshCards() {
    if (!list) return;
    const response = await fetch(list.dataset.source, { credentials: "same-origin" });
    if (!response.ok) return;
    const holder = document.createElement("div");
    holder.innerHTML = await response.text();
    const incoming = [...holder.querySelectorAll("[data-key]")];
    const fresh = new Map(incoming.map((card) => [card.dataset.key, card]));
    for (const card of [...list.querySelectorAll("[data-key]")]) {
      if (!fresh.has(card.dataset.key) && !card.classList.contains("closed")) {
        say(`${card.dataset.title} is no longer waiting.`);
        if (card.dataset.acted || card.contains(document.activeElement)) {
          close(card);
        } else {
          card.remove();
        }
      }
      fresh.delete(card.dataset.key);
    }
    for (const card of fresh.values()) {
      list.appendChild(card);
      say(`New: ${card.dataset.title}.`);
    }
    const empty = document.getElementById("empty");
    if (empty) empty.hidden = list.querySelector("[data-key]:not(.closed)") !== null;
  }

  if (document.body.dataset.inbox) {
    const inbox = new EventSource(document.body.dataset.inbox);
    inbox.addEventListener("inbox", () => { refreshCards(); });
  }

  const events = document.getElementById("events");
  if (events) {
    const textOut = document.getElementById("live-text");
    const ending = document.getElementById("ending");
    const stream = new EventSource(events.dataset.source);
    const settles = new Set(["approval_requested", "question_asked", "approval_decided",
      "question_answered", "run_ended"]);
    stream.addEventListener("run_event", (message) => {
      const e = JSON.parse(message.data);
      const item = document.createElement("li");
      const seq = document.createElement("span");
      seq.className = "seq";
      seq.textContent = `#${e.seq}`;
      item.append(seq, `${e.kind}${e.step != null ? " · step " + e.step : ""}  ${e.summary}`);
      events.appendChild(item);
      if (e.kind === "step_started" && textOut) textOut.textContent = "";
      if (settles.has(e.kind)) refreshCards();
    });
    stream.addEventListener("text", (message) => {
      if (textOut) textOut.textContent += JSON.parse(message.data).text;
    });
    stream.addEventListener("end", (message) => {
      stream.close();
      const end = JSON.parse(message.data);
      if (ending) ending.textContent = `The run ended: ${end.terminal_reason || "closed"}.`;
      refreshCards();
    });
  }
})();
"""
