"""`python -m capstan` is the `capstan` command."""

from capstan.cli.main import main

main()
