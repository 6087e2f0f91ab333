"""A black-box conformance suite for Battleship Salvo referees (protocol v2).

Run it as ``salvo conformance --broker URL ...`` or
``pytest --pyargs salvo.conformance --broker URL ...`` (the public package); see docs/conformance.md.
"""

from salvo.tools.conformance.cases import CASES, GROUPS, Case
from salvo.tools.conformance.suite import Options, Result, SuiteBroken, run_suite, summary

__all__ = ["CASES", "GROUPS", "Case", "Options", "Result", "SuiteBroken", "run_suite", "summary"]
