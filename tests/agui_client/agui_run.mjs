// An outside AG-UI client: @ag-ui/client's HttpAgent runs a plan against `capstan serve` and
// prints what it received as JSON lines. The library checks every stream itself (events in a
// valid order, interrupts answered before the thread goes on); a violation is an error here.
//
// stdin: {"url", "token", "threadId", "runs": [{"message"?, "resume"?, "abortAfter"?}]}
//   message     a user message added before the run
//   resume      "approve" | "deny": answer every pending interrupt so; or the entries as given
//   abortAfter  {"type", "count"}: drop the connection after that many events of that type
// stdout, one JSON object a line:
//   {"run": i, "event": {...}}                      every event, as the agent applied it
//   {"run": i, "end": {"result", "aborted", "error", "status", "pendingInterrupts"}}
//   {"messages": [...]}                             the agent's messages at the end
import { HttpAgent } from "@ag-ui/client";

const plan = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => resolve(text));
}));

const out = (line) => process.stdout.write(JSON.stringify(line) + "\n");

const agent = new HttpAgent({
  url: plan.url,
  threadId: plan.threadId,
  headers: plan.token ? { Authorization: `Bearer ${plan.token}` } : {},
});

function answers(resume) {
  if (Array.isArray(resume)) return resume;
  return agent.pendingInterrupts.map((interrupt) =>
    interrupt.reason === "question"
      ? { interruptId: interrupt.id, status: "resolved", payload: { text: "yes" } }
      : resume === "deny"
        ? { interruptId: interrupt.id, status: "resolved", payload: { action: "deny", reason: "no" } }
        : { interruptId: interrupt.id, status: "resolved", payload: { action: "approve" } },
  );
}

let counter = 0;
for (const [index, step] of plan.runs.entries()) {
  if (step.message !== undefined) {
    agent.addMessage({ id: `user-${plan.threadId}-${++counter}`, role: "user", content: step.message });
  }
  let seen = 0;
  let aborted = false;
  const subscriber = {
    onEvent({ event }) {
      out({ run: index, event });
      const limit = step.abortAfter;
      if (limit && event.type === limit.type && ++seen === limit.count) {
        aborted = true;
        agent.abortRun();
      }
    },
  };
  const end = { result: null, aborted: false, error: null, status: null, pendingInterrupts: [] };
  try {
    const parameters = step.resume === undefined ? {} : { resume: answers(step.resume) };
    if (step.runId) parameters.runId = step.runId;
    const done = await agent.runAgent(parameters, subscriber);
    end.result = done.result ?? null;
  } catch (error) {
    end.error = String(error?.message ?? error);
    end.status = error?.status ?? null;
  }
  end.aborted = aborted;
  end.pendingInterrupts = agent.pendingInterrupts;
  out({ run: index, end });
}
out({ messages: agent.messages });
