"""The console with two applications and an admin token, in a real headless Chromium."""

from __future__ import annotations

import json

import pytest
import requests

from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import Application, OptimizerServer

from .conftest import run_search, search_plan

PAGE_TIMEOUT = 15.0
HTTP_TIMEOUT = 10.0
ADMIN_TOKEN = "c0nsole-admin"
APPS = ("example.com/a", "example.com/b")

pytestmark = [pytest.mark.browser]


def section(app: str) -> str:
    return f"section.app[data-app='{app}']"


def press(browser, selector: str) -> None:
    """A real click; the element is scrolled into view first (the second section is below the fold)."""
    browser.evaluate(f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'center'}})")
    browser.click(selector)


def visible(browser, selector: str) -> bool:
    return browser.evaluate(f"!document.querySelector({json.dumps(selector)}).hidden")


@pytest.fixture
def server():
    applications = []
    for seed, app in enumerate(APPS):
        driver = SearchDriver.from_plan(search_plan(app=app, steps=6, seed=seed))
        run_search(driver, seed=seed, until_steps=4)
        applications.append(Application(driver, app=app))
    with OptimizerServer(applications=applications, admin_token=ADMIN_TOKEN) as served:
        for app in APPS:  # a command in flight for each, for Abort to act on
            org, name = app.split("/")
            path = f"{served.url}/accounts/{org}/applications/{name}/servo"
            reply = requests.post(
                path, json={"event": "WHATS_NEXT", "param": None, "servo_uid": None}, timeout=HTTP_TIMEOUT
            )
            assert reply.json()["cmd"] == "ADJUST"
        yield served


@pytest.mark.timeout(90)
def test_each_application_has_its_section_and_the_console_is_read_only_without_the_token(browser, server):
    browser.open(server.url + "/")
    browser.wait_for("document.querySelectorAll('section.app').length === 2", PAGE_TIMEOUT)
    for app in APPS:
        browser.wait_for(
            f"document.querySelector(\"{section(app)} .charts svg[data-chart='objective']\") !== null",
            PAGE_TIMEOUT,
        )
        assert browser.evaluate(f'document.querySelector("{section(app)} .app-name").textContent') == app
        assert "ADJUST c1" in browser.evaluate(
            f'document.querySelector("{section(app)} .current").textContent'
        )
        assert not visible(browser, f"{section(app)} .abort")
        assert visible(browser, f"{section(app)} .readonly-note")
    assert visible(browser, "#admin") and browser.evaluate("document.body.dataset.readonly") == "true"
    # Nothing could be pressed: no command was armed.
    assert not any(server.application(app).state()["cancel_armed"] for app in APPS)


@pytest.mark.timeout(90)
def test_with_the_token_abort_cancels_only_its_own_application(browser, server):
    browser.open(server.url + "/#admin-token=" + ADMIN_TOKEN)
    browser.wait_for("document.querySelectorAll('section.app').length === 2", PAGE_TIMEOUT)
    browser.wait_for(f'!document.querySelector("{section(APPS[1])} .abort").hidden', PAGE_TIMEOUT)
    assert browser.evaluate("location.hash") == ""  # the token does not stay in the address bar
    assert not visible(browser, "#admin")
    press(browser, f"{section(APPS[1])} .abort")
    browser.wait_for(
        f"document.querySelector(\"{section(APPS[1])} .abort-result\").dataset.answers === '1'", PAGE_TIMEOUT
    )
    answer = browser.evaluate(f'document.querySelector("{section(APPS[1])} .abort-result").textContent')
    assert "ADJUST c1 will be answered cancel" in answer
    assert server.application(APPS[1]).state()["cancel_armed"] is True
    assert server.application(APPS[0]).state()["cancel_armed"] is False
    assert browser.evaluate(f'document.querySelector("{section(APPS[0])} .abort-result").textContent') == ""

    # A wrong token is refused by the server, and the console falls back to read-only.
    browser.evaluate("sessionStorage.setItem('servo-actors-admin-token', 'wrong')")
    press(browser, f"{section(APPS[0])} .abort")
    browser.wait_for(
        f"document.querySelector(\"{section(APPS[0])} .abort-result\").dataset.answers === '1'", PAGE_TIMEOUT
    )
    assert "admin token" in browser.evaluate(
        f'document.querySelector("{section(APPS[0])} .abort-result").textContent'
    )
    assert (
        browser.evaluate("document.querySelector('#admin-result').textContent")
        == "the admin token was refused"
    )
    assert visible(browser, "#admin") and not visible(browser, f"{section(APPS[0])} .abort")
    assert server.application(APPS[0]).state()["cancel_armed"] is False
