"""Public path of the black-box conformance suite for Battleship Salvo referees (protocol v2).

Run it as ``salvo conformance --broker URL ...`` or
``pytest --pyargs salvo.conformance --broker URL ...`` (this package holds the
one test module pytest collects; the plugin with ``--broker`` is
:mod:`salvo.tools.conformance.plugin`); from Python,
``salvo.conformance.run_suite(Options(...))``. See docs/conformance.md.

The suite lives in :mod:`salvo.tools.conformance`; this package only names it
for teams. Code inside salvo imports the real home.
"""

from salvo.tools.conformance.cases import CASES, GROUPS, Case
from salvo.tools.conformance.suite import Options, Result, SuiteBroken, run_suite, summary

__all__ = ["CASES", "GROUPS", "Case", "Options", "Result", "SuiteBroken", "run_suite", "summary"]
