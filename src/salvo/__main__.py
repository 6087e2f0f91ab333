"""``python -m salvo`` is the ``salvo`` command."""

from salvo.cli import main

main()
