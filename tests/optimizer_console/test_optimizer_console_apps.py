"""The console with two applications, with and without an admin token, in a real headless Chromium.

What is "visible" is what a person sees: the element's computed style shows it and it takes room
on the page, not merely that its ``hidden`` attribute is off (a CSS rule can override that).
"""

from __future__ import annotations

import json

import pytest
import requests

from servo_actors.optimizer.application import Application
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

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
    """Shown on the page: a box with a size, and neither ``display: none`` nor ``visibility: hidden``
    on the way (an element inside a hidden one has an empty box)."""
    return browser.evaluate(
        f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
        " const r = e.getBoundingClientRect(), style = getComputedStyle(e);"
        " return r.width > 0 && r.height > 0 && style.display !== 'none' && style.visibility !== 'hidden'; })()"
    )


def serve_apps(admin_token: str | None):
    applications = []
    for seed, app in enumerate(APPS):
        driver = SearchDriver.from_plan(search_plan(app=app, steps=6, seed=seed))
        run_search(driver, seed=seed, until_steps=4)
        applications.append(Application(driver, app=app))
    with OptimizerServer(applications=applications, admin_token=admin_token) as served:
        for app in APPS:  # a command in flight for each, for Abort to act on
            org, name = app.split("/")
            path = f"{served.url}/accounts/{org}/applications/{name}/servo"
            reply = requests.post(
                path, json={"event": "WHATS_NEXT", "param": None, "servo_uid": None}, timeout=HTTP_TIMEOUT
            )
            assert reply.json()["cmd"] == "ADJUST"
        yield served


@pytest.fixture
def server():
    yield from serve_apps(ADMIN_TOKEN)


@pytest.fixture
def open_server():
    """The same two applications, and no admin token: anyone may Abort."""
    yield from serve_apps(None)


@pytest.mark.timeout(90)
def test_without_an_admin_token_the_console_shows_no_token_form_and_every_abort(browser, open_server):
    browser.open(open_server.url + "/")
    browser.wait_for("document.querySelectorAll('section.app').length === 2", PAGE_TIMEOUT)
    for app in APPS:
        browser.wait_for(
            f"document.querySelector(\"{section(app)} .charts svg[data-chart='objective']\") !== null",
            PAGE_TIMEOUT,
        )
    assert (
        requests.get(open_server.url + "/admin/apps", timeout=HTTP_TIMEOUT).json()["admin_token_required"]
        is False
    )
    assert browser.evaluate("document.body.dataset.readonly") == "false"
    # Nothing says "read-only", and there is no token field to fill in.
    assert not visible(browser, "#admin") and not visible(browser, "#admin-token")
    for app in APPS:
        assert visible(browser, f"{section(app)} .abort")
        assert not visible(browser, f"{section(app)} .readonly-note")
    # The progress bar of the command in flight is where it was, and as wide as it was.
    track = browser.evaluate(
        "document.querySelector('section.app .progress-track').getBoundingClientRect().width"
    )
    assert track > 100


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
    # Charts are drawn after the first states arrive and push the sections down: wait for them, so
    # the buttons no longer move between finding one and clicking it.
    for app in APPS:
        chart = f"{section(app)} .charts svg[data-chart='objective']"
        browser.wait_for(f"document.querySelector({json.dumps(chart)}) !== null", PAGE_TIMEOUT)
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
