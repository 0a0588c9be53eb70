"""`python -m capstan` is the `capstan` command."""

from capstan.cli import main

main()
