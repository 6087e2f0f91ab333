"""One pytest test per conformance case (the suite runs once per session)."""

from __future__ import annotations

import pytest

from salvo.conformance.cases import CASES
from salvo.conformance.suite import Result


@pytest.mark.parametrize("case_id", list(CASES))
def test_case(case_id: str, conformance_results: dict[str, Result]) -> None:
    result = conformance_results[case_id]
    if result.status == "skip":
        pytest.skip(result.detail)
    assert result.status == "pass", f"§{result.case.section} {result.case.title}: {result.detail}"
