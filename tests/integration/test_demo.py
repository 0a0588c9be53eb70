"""`capstan demo` tells the story it promises: a worker SIGKILLed mid-run, the run carried on by
another, an approval bound to its hash, a checked answer and a verified audit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capstan.runtime import local_model
from tests.conftest import free_port

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_scripted_demo_survives_its_killed_worker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "CAPSTAN_"))}
    env.update(CAPSTAN_DATA_DIR=str(tmp_path / "data"), CAPSTAN_TEMPORAL_PORT=str(free_port()))
    out = subprocess.run(
        [sys.executable, "-m", "capstan", "demo", "--scripted"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert ">>> SIGKILL worker 1" in text and "the run carried on at step 3 on worker 2" in text
    assert "arguments hash" in text and "approved by" in text
    assert "summary.txt matches the line of notes.txt, and so does the answer" in text
    assert "hash chain and blobs verified" in text
    page = next((tmp_path / "data").glob("audit-*.html"))
    assert "The harbour crane lifts 42 containers an hour." in page.read_text()
    assert text.index("SIGKILL") < text.index("carried on") < text.index("approval request")


@pytest.mark.local_model
@pytest.mark.skipif(not local_model.available(), reason="the `local` extra is not installed")
def test_the_bundled_model_does_the_demos_task(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "CAPSTAN_"))}
    env.update(
        CAPSTAN_DATA_DIR=str(tmp_path / "data"),
        CAPSTAN_TEMPORAL_PORT=str(free_port()),
        CAPSTAN_LOCAL_MODEL_PORT=str(free_port()),
    )
    out = subprocess.run(
        [sys.executable, "-m", "capstan", "demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    text = out.stdout
    assert "model: the bundled SmolLM2-135M" in text, text + out.stderr
    assert ">>> SIGKILL worker 1" in text and "approval request" in text
    # the schema leaves the model only real choices (see local_choices): it does the task
    assert "summary.txt matches the line of notes.txt, and so does the answer" in text, text
    assert out.returncode == 0, text + out.stderr
