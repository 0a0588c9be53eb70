"""The `capstan` command line: a Temporal client like the Python client."""

from capstan.cli.main import main

__all__ = ["main"]
