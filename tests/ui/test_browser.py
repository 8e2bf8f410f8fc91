"""`evotrainer ui` as a user starts it, over real HTTP, and end to end in headless Chromium
(Debian's chromium and chromium-driver, driven by Selenium): click from the graph to a
branch to a finding to its rollouts, and watch a live update arrive without a reload.
Screenshots are kept under pytest's tmp dir, and copied to EVOTRAINER_SCREENSHOTS when set
(README's pictures come from there). Browser tests skip where no chromium is installed, except in CI, where they fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.conftest import IN_CI
from tests.ui.conftest import EVOTRAINER, Seeded, free_port, wait_until_listening

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def test_a_non_loopback_bind_needs_the_flag_and_then_a_token(seeded: Seeded) -> None:
    refused = seeded.cli("ui", "--host", "0.0.0.0")
    assert refused.returncode == 2 and "--allow-remote" in refused.stderr and refused.stderr.count("\n") == 1
    assert seeded.cli("ui", "--token", "short").returncode == 2
    port = free_port()
    process = subprocess.Popen([EVOTRAINER, "ui", "--host", "0.0.0.0", "--allow-remote", "--port", str(port)],
                               env=seeded.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until_listening(port, process)
        assert process.stdout is not None
        printed = process.stdout.readline()
        token = re.search(r"\?token=(\S+)", printed)
        assert token, printed
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/").status_code == 401
        assert httpx.get(f"{base}/e/digits", headers={"Authorization": "Bearer nope-nope-nope-nope"}).status_code == 401
        assert httpx.get(f"{base}/e/digits?token={token.group(1)}").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_real_server_serves_pages_and_refuses_writes(server: str) -> None:
    assert httpx.get(f"{server}/e/digits").status_code == 200
    assert httpx.post(f"{server}/e/digits", json={"x": 1}).status_code == 405
    missing = httpx.get(f"{server}/e/digits/b/no-such-branch")
    assert missing.status_code == 404 and "no branch digits/no-such-branch" in missing.text


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if not (CHROMIUM and DRIVER):
        why = "no chromium/chromedriver here (Debian: apt-get install chromium chromium-driver)"
        if IN_CI:  # the Makefile installs them: in CI a missing browser is a failure, not a skip
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    from selenium import webdriver  # a dev dependency: its absence is an error, never a skip
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1000",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: object, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    if os.environ.get("EVOTRAINER_SCREENSHOTS"):
        target = Path(os.environ["EVOTRAINER_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)


def wait_for(condition, timeout_s: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_click_from_the_graph_to_the_rollouts_and_see_a_live_update(
    browser, server: str, seeded: Seeded, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"{server}/")
    driver.find_element(By.LINK_TEXT, "digits").click()
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "svg.lineage g.node"))
    tree = {b["ref"]: b for b in json.loads(seeded.cli("lineage", "digits", "--json").stdout)}
    nodes = driver.find_elements(By.CSS_SELECTOR, "svg.lineage g.node")
    assert {n.get_attribute("data-ref") for n in nodes} == set(tree)
    for node in nodes:
        assert node.get_attribute("data-status") == tree[node.get_attribute("data-ref")]["status"]
    screenshot(driver, tmp_path, "lineage")

    candidate = next(r for r in tree if not r.endswith("/main"))
    driver.find_element(By.CSS_SELECTOR, f'g.node[data-ref="{candidate}"] a').click()
    wait_for(lambda: driver.find_elements(By.ID, "evaluations"))
    assert driver.find_element(By.TAG_NAME, "h1").text == candidate
    shown = float(driver.find_element(By.CSS_SELECTOR, "#evaluations td.avg").text)
    assert shown == pytest.approx(tree[candidate]["last_score"], abs=5e-4)
    screenshot(driver, tmp_path, "branch")

    finding = driver.find_element(By.CSS_SELECTOR, "a.finding-rollouts")
    count = int(finding.text.split()[0])
    finding.click()
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "div.rollout"))
    assert len(driver.find_elements(By.CSS_SELECTOR, "div.rollout")) == count
    screenshot(driver, tmp_path, "rollouts")

    # Live: a new branch and a task in flight appear on an open graph page, without a reload
    # (on an experiment of its own: the other tests read `digits` as the run left it).
    live = BranchRef("browser-live", "main")
    with EventStore.connect(seeded.url, actor="ui-test") as store:
        store.create_experiment(live.experiment, {"domain": "math"})
        driver.get(f"{server}/e/{live.experiment}")
        driver.execute_script("window.notReloaded = true;")
        store.fork(BranchRef(live.experiment, "main", 1), "forked-while-watched", "watched from the browser")
        store.append(BranchRef(live.experiment, "forked-while-watched"), [NewEvent("TaskRequested", {
            "task_id": "live-1", "kind": "train", "queue": "train", "inputs": {}})])  # fmt: skip
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, 'g.node[data-ref="browser-live/forked-while-watched"]'))
    wait_for(lambda: "live-1" in driver.find_element(By.ID, "running").text)  # the fork may show a poll earlier
    assert driver.execute_script("return window.notReloaded === true;")
    screenshot(driver, tmp_path, "live")
