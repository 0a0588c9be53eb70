"""`capstan serve`: the HTTP API, live streams and the approval inbox.

A Temporal client like the CLI: it imports the client, history reading, the core and the
runtime edges, never the workflow, activities or worker (import-linter checks it).
"""

from capstan.api.app import create_app
from capstan.runtime.api_settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
