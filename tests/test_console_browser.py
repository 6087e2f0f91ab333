"""The organiser console in a real browser (headless Debian Chromium driven
by Selenium) against the in-memory director: log in through the form, see
the arenas and the standings, use the controls (the director's state changes,
the page follows it live), see a refused control's error. The screenshot
(1600x1000) goes to build/screenshots/console.png; docs/console.png is a copy."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from console_fake import FakeDirector
from salvo.organiser.console import Console

from chromium import SHOTS, chromium

PASSWORD = "correct horse battery"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = chromium(tmp_path / "chromium", 1600, 1000)
    # The viewport itself 1600x1000 (a laptop's), whatever the window's frame takes.
    metrics = {"width": 1600, "height": 1000, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    yield driver
    driver.quit()


@pytest.fixture
def fake() -> FakeDirector:
    return FakeDirector()


@pytest.fixture
def console(fake: FakeDirector) -> Iterator[Console]:
    with Console(fake, "127.0.0.1", 0, PASSWORD) as c:
        yield c


def _text(driver: Any, selector: str) -> str:
    """innerText of the first match, read in one step: the page redraws on
    every status, so a found element can go stale at once."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(driver.execute_script(script, selector))


def _hidden(driver: Any, selector: str) -> bool:
    return bool(driver.execute_script("return document.querySelector(arguments[0]).hidden", selector))


def _click(driver: Any, selector: str) -> None:
    """Click the first match, found and clicked in one step (see _text)."""
    script = "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;"
    assert driver.execute_script(script, selector), f"nothing to click at {selector}"


def _until(driver: Any, what: str, check: Callable[[], Any], timeout: float = 10) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: check())
    except Exception:
        SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SHOTS / "console-failure.png"))
        raise AssertionError(f"never saw {what}; the page shows:\n{_text(driver, 'body')}") from None


def _log_in(driver: Any, password: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, "password")
    field.clear()
    field.send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()


def _answer(driver: Any, reason: str, winner: str | None = None) -> None:
    """Fill the dialog a control asks in, and confirm."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _until(driver, "the dialog", lambda: driver.execute_script("return document.getElementById('ask').open"))
    if winner is not None:
        Select(driver.find_element(By.ID, "ask-winner")).select_by_value(winner)
    driver.find_element(By.ID, "ask-reason").send_keys(reason)
    driver.find_element(By.ID, "ask-ok").click()


def test_the_organiser_logs_in_and_runs_the_night_from_the_console(
    console: Console, fake: FakeDirector, browser: Any
) -> None:
    browser.get(console.url)
    _until(browser, "the login form", lambda: _text(browser, "#login"))
    _log_in(browser, "not the password")
    _until(browser, "the refusal", lambda: "Wrong password." in _text(browser, "#login-message"))
    _log_in(browser, PASSWORD)

    # The live state: the tournament, every arena, the standings.
    _until(browser, "the live stream", lambda: _text(browser, "#conn") == "live")
    _until(browser, "the round", lambda: _text(browser, "#t-round") == "Round 3 of 7")
    assert _text(browser, "#t-games") == "8 of 28 games played · 20 left"
    card = 'article[data-arena="arena1"]'
    assert "ada vs bletchley" in _text(browser, card) and "Turn 12" in _text(browser, card)
    assert [_text(browser, f"#standings tr[data-team='{t}'] td.team") for t in ("ada", "grace")] == ["ada", "grace"]
    top = _text(browser, "#standings tbody tr").split("\t")
    assert top[:3] == ["1", "ada", "2"] and top[-3:-1] == ["41 / 88", "46.6%"]

    # Pause the game in arena1: the director's state changes, the page follows.
    _click(browser, f'{card} button[data-action="pause-game"]')
    _until(browser, "the director told", lambda: fake.status()["arenas"][0]["paused"])
    _until(browser, "arena1 paused", lambda: browser.find_elements("css selector", f"{card}.paused"))
    assert "PAUSED" in _text(browser, card).upper() and _text(browser, f'{card} button[data-action="resume-game"]')
    _until(browser, "the pause audited", lambda: "pause-game" in _text(browser, "#audit"))

    # A refused control: its code and reason on the page, nothing changed.
    _click(browser, f'{card} button[data-action="extra-time"]')
    _until(browser, "the refusal", lambda: _text(browser, "#error-code") == "paused:")
    assert _text(browser, "#error-reason") == "the clock in arena1 is stopped: resume the game first"
    assert [a for a, _, _ in fake.applied] == ["pause-game"]
    _click(browser, "#error-close")
    _until(browser, "the error dismissed", lambda: _hidden(browser, "#error"))

    # What the director changes by itself shows without a reload.
    with fake.lock:
        fake.state["arenas"][1].update(state="turn", turn=1, current="colossus")
    _until(browser, "arena2 playing", lambda: "colossus to fire" in _text(browser, 'article[data-arena="arena2"]'))

    # Controls that ask first: the reason (and a winner) go to the director.
    _click(browser, 'article[data-arena="arena3"] button[data-action="abort-game"]')
    _answer(browser, "fortran's laptop died")
    _until(browser, "arena3 idle", lambda: "no game" in _text(browser, 'article[data-arena="arena3"]'))
    assert fake.applied[-1] == ("abort-game", {"arena": "arena3", "reason": "fortran's laptop died"}, "console")
    _until(browser, "the pair back in the queue", lambda: "enigma vs fortran" in _text(browser, "#pending"))
    _click(browser, '#games tr[data-game="2"] button[data-action="override"]')
    _answer(browser, "scorer's mistake", winner="fortran")
    _until(browser, "the override", lambda: "overridden" in _text(browser, '#games tr[data-game="2"]'))
    assert fake.applied[-1] == ("override", {"game": 2, "winner": "fortran", "reason": "scorer's mistake"}, "console")
    _click(browser, "#standings tr[data-team='grace'] button[data-action='withdraw']")
    _answer(browser, "went home")
    grace = "#standings tr[data-team='grace']"
    _until(browser, "grace withdrawn", lambda: "WITHDRAWN" in _text(browser, grace).upper())
    _click(browser, '#late button[data-action="admit-late"]')
    _until(browser, "lovelace admitted", lambda: "admitted" in _text(browser, '#late tr[data-late="lovelace"]'))
    _click(browser, 'button[data-action="pause"]')
    _until(browser, "the tournament paused", lambda: _text(browser, "#t-paused"))
    _until(browser, "the notice gone", lambda: _hidden(browser, "#notice"), timeout=8)

    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "console.png"))

    # Logging out: back to the form, and the API no longer answers.
    _click(browser, "#logout")
    _until(browser, "the login form again", lambda: _text(browser, "#login"))
    browser.get(console.url + "api/status")
    assert "login_required" in _text(browser, "body")


def test_the_page_says_plainly_when_the_director_stops_answering(fake: FakeDirector, browser: Any) -> None:
    """The director's loop stuck (its status never comes), then the director
    gone: the page says so over its last status, dimmed, instead of a night
    that looks normal; it is itself again as soon as the director answers,
    and back at the login form when a new director is there."""
    server = Console(fake, "127.0.0.1", 0, PASSWORD)
    server.app.state.console.heartbeat_s = 0.2  # "alive" this often when nothing changes
    port = server.start().port
    release = threading.Event()
    try:
        browser.get(server.url)
        _log_in(browser, PASSWORD)
        _until(browser, "the live page", lambda: _text(browser, "#conn") == "live" and _text(browser, "#t-games"))
        _until(
            browser, "the heartbeat learnt", lambda: browser.execute_script("return window.salvoConsole.every()") == 0.2
        )
        assert _hidden(browser, "#offline")

        answer = fake.status
        fake.status = lambda: (release.wait(10), answer())[1]  # type: ignore[method-assign]
        _until(browser, "the director not answering", lambda: not _hidden(browser, "#offline"), 5)
        banner = _text(browser, "#offline")
        assert "The director is not answering." in banner and "Nothing heard from it for" in banner
        assert browser.execute_script("return document.body.classList.contains('stale')")
        assert "8 of 28 games played" in _text(browser, "#t-games")  # its last status, still there
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "console-not-answering.png"))
        release.set()
        _until(browser, "the director answering again", lambda: _hidden(browser, "#offline"), 5)
        assert not browser.execute_script("return document.body.classList.contains('stale')")

        server.close()  # the director exits
        _until(browser, "the director gone", lambda: "It has stopped" in _text(browser, "#offline"), 5)
        assert not _hidden(browser, "#offline") and _text(browser, "#conn") == "not answering"
        server = Console(fake, "127.0.0.1", port, PASSWORD).start()  # started again: a new session is needed
        _until(browser, "the login form", lambda: _text(browser, "#login"), 10)
    finally:
        release.set()
        server.close()
