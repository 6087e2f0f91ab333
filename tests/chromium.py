"""Headless Debian Chromium for the page tests, and the ``browser`` marker's
guard: conftest marks every test whose fixtures start one (``browser``), and
an unmarked test may not (``pytest -m "not browser"`` must run without)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: Set by conftest for each test: whether it is marked ``browser``.
may_start = True
#: Where page tests leave their screenshots to look at: outside the checkout
#: (no test writes into it), unless SALVO_SCREENSHOTS says where.
SHOTS = Path(os.environ.get("SALVO_SCREENSHOTS") or Path(tempfile.gettempdir()) / "salvo-screenshots")


def chromium(profile: Path, width: int, height: int) -> Any:
    """Headless Debian Chromium through selenium (skipped without it, failed
    when SALVO_REQUIRE_BROWSER says it must be there). Quit it after use."""
    if not may_start:
        pytest.fail("this test starts Chromium: give it the browser fixture (conftest marks it browser)")
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("SALVO_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromedriver are required (apt-get install -y chromium chromium-driver)")
        pytest.skip("no chromium/chromedriver here (bash .ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
