"""The worker process: everything a worker needs around the workflow and its activities, and
nothing a client needs.

- `config`: the worker's whole configuration, loaded and checked once at start
  (`WorkerConfig`): settings, tool policy, finish guard, tools, MCP servers, sandbox jail,
  webhooks and build id. A mistake is one `ConfigError` line before anything connects.
- `user_code`, `policy_file`, `sandbox`, `build_id`: the parts it is loaded from.
- `startup`: what the worker checks and says at start (models, variables, its catalog).
- `runner`: how workflow code runs (sandboxed or not) and whether tracing is installed.
- `run_cache`, `memory`, `sdk_shortcuts`: a worker's cache of runs, its memory, SDK fast paths.
- `health`, `probe`: its liveness and readiness endpoint, and the probe that asks it.

`worker.py` (the composition root) composes these; clients, the API and the CLI never import
this package (import-linter). What clients and workers share stays in `capstan.runtime`.
"""
