"""One pytest test per conformance case (the suite runs once per session).

A case the suite itself could not judge (status ERROR: a bug of the suite)
raises in the test's setup, so pytest reports it as an error, not as a
failure of the referee."""

from __future__ import annotations

import pytest

from salvo.tools.conformance.cases import CASES
from salvo.tools.conformance.suite import Result


class SuiteError(Exception):
    """The conformance suite broke here; the referee was not judged."""


@pytest.fixture(params=list(CASES))
def result(request: pytest.FixtureRequest, conformance_results: dict[str, Result]) -> Result:
    outcome = conformance_results[request.param]
    if outcome.status == "error":
        raise SuiteError(outcome.detail)
    return outcome


def test_case(result: Result) -> None:
    if result.status == "skip":
        pytest.skip(result.detail)
    assert result.status == "pass", f"§{result.case.section} {result.case.title}: {result.detail}"
