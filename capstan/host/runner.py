"""How a worker runs workflow code (sandboxed or not) and whether it installs Temporal's
tracing interceptor: two choices with a measured cost, made here once."""

from __future__ import annotations

from opentelemetry.trace import TracerProvider
from temporalio.worker import Interceptor, UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from capstan.runtime.config import Settings
from capstan.runtime.telemetry import Instruments, tracing_configured

__all__ = ["tracing_interceptors", "workflow_runner"]


def tracing_interceptors(
    telemetry: Instruments, tracer_provider: TracerProvider | None
) -> list[Interceptor]:
    """Temporal's replay-safe tracing interceptor, when spans can go anywhere.

    With no tracer provider configured every span is dropped, yet the interceptor still
    propagates a context header through every activity and wraps every activation, a
    noticeable share of a worker's CPU (bench/README.md). So it is installed only with a
    provider (`OTEL_EXPORTER_OTLP_ENDPOINT`, or one given or set
    globally before the worker is built). Workflow spans are made even when the client that
    started the run does not trace.
    """
    if not tracing_configured(tracer_provider):
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(telemetry.tracer, always_create_workflow_spans=True)]


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """How the workflow code runs (`CAPSTAN_WORKFLOW_SANDBOX`).

    The only workflow code a Capstan worker runs is Capstan's own, and its determinism is
    checked where it is written: ruff bans clocks, sleeps, randomness, uuid, environment reads,
    threads, subprocesses, sockets and IO libraries in `capstan/core` and `workflows/`,
    import-linter keeps IO layers out of them, a test forbids mutable module state there, the
    stored histories replay under Temporal's strict sandbox, and the test suite runs every
    in-process run under it (`strict`: modules re-imported per run, restricted calls refused).
    A worker then runs it `off` the sandbox (the default): the sandbox's protection is the same
    as the suite's, its cost is per run and per activation (a module import per run, code
    strings `exec`ed for every payload: replay about twice as slow, bench/README.md). Sharing
    the modules into the sandbox (`with_passthrough_modules`) turns the restrictions off for
    exactly this code and still costs, so it is not offered.
    """
    if settings.workflow_sandbox == "strict":
        return SandboxedWorkflowRunner()
    return UnsandboxedWorkflowRunner()
