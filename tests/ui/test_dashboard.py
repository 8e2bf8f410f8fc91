"""The dashboard over a real tiny search, through Starlette's test client and the real
Postgres: every page, the links from the graph to a branch to a finding to its rollouts,
the figures shown against `evotrainer sql` and the library, refused writes, 404 pages,
the token rule and the live position."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.ui.app import StorePool, create_app
from tests.ui.conftest import Seeded


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(seeded.url)) as opened:
        yield opened


def sql(seeded: Seeded, query: str) -> list[dict]:
    done = seeded.cli("sql", query, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hrefs(page: str, pattern: str = "") -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page) if pattern in h]


def attr_rows(page: str, attribute: str, tag: str = "tr") -> dict[str, str]:
    """{value of `attribute`: the <tag> element carrying it, up to its end}."""
    return {m.group(1): m.group(0) for m in re.finditer(rf'<{tag} [^>]*{attribute}="([^"]+)".*?</{tag}>', page, re.S)}


def test_the_experiments_page_shows_what_sql_says(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/").text
    want = sql(seeded, "SELECT count(*) AS n, max(best_score) AS best FROM projections.branch_state"
                       " WHERE experiment = 'digits'")[0]  # fmt: skip
    row = attr_rows(page, "data-experiment")["digits"]
    assert f'<td class="num">{want["n"]}</td>' in row
    assert f'<td class="num best">{want["best"]:.3f}</td>' in row
    assert 'href="/e/digits"' in row and "math" in row


def test_the_graph_shows_each_branch_as_the_lineage_command_does(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/e/digits").text
    assert page.isascii()  # one byte a character, the title included (svg.ELLIPSIS says why)
    tree = json.loads(seeded.cli("lineage", "digits", "--json").stdout)
    nodes = attr_rows(page, "data-ref", tag="g")
    assert len(tree) == 4
    for branch in tree:
        node = nodes[branch["ref"]]
        assert f'data-status="{branch["status"]}"' in node
        assert f'data-score="{branch["last_score"]:.3f}"' in node
        assert f'href="/e/digits/b/{branch["ref"].partition("/")[2]}"' in node
    incumbent = next(b["ref"] for b in tree if b["incumbent"])
    assert f'id="incumbent" href="/e/digits/b/{incumbent.partition("/")[2]}"' in page
    # Each intervention branch's edge is labelled with its intervention and links to it; an
    # intervention that failed its backtest was dropped, never forked, and has no edge.
    interventions = sql(seeded, "SELECT i.intervention_id, EXISTS (SELECT 1 FROM projections.backtests b"
                                " WHERE b.experiment = i.experiment AND b.intervention_id = i.intervention_id"
                                " AND NOT b.passed) AS dropped FROM projections.interventions i"
                                " WHERE i.experiment = 'digits'")  # fmt: skip
    forked = [row["intervention_id"] for row in interventions if not row["dropped"]]
    assert forked
    for intervention_id in forked:
        assert f'/e/digits/interventions/{intervention_id}' in page
    assert page.count("/e/digits/interventions/") == len(forked) * 2  # its edge in the picture and the table


def test_graph_to_branch_to_finding_to_rollouts(client: TestClient, seeded: Seeded) -> None:
    from evotrainer.artifacts import open_store
    from evotrainer.evidence import from_jsonl

    graph = client.get("/e/digits").text
    candidates = [h for h in hrefs(graph, "/b/") if not h.endswith("/main")]
    branch_url = candidates[0]
    page = client.get(branch_url)
    assert page.status_code == 200
    ref = BranchRef.parse(branch_url.removeprefix("/e/").replace("/b/", "/"))
    evaluations = sql(seeded, f"SELECT seq, avg_at_k FROM projections.evaluations WHERE experiment = '{ref.experiment}'"
                              f" AND branch = '{ref.branch}' ORDER BY seq")  # fmt: skip
    for row in evaluations:
        assert re.search(rf'<tr data-seq="{row["seq"]}">.*?<td class="num avg">{row["avg_at_k"]:.3f}</td>', page.text, re.S)
    # The curves carry every step TrainingCompleted recorded.
    with EventStore.connect(seeded.url) as store:
        trained = [e for e in store.read_branch(ref) if e.type == "TrainingCompleted" and e.branch == ref.branch]
    rewards = [m["reward"] for m in trained[0].payload["step_metrics"]]
    shown = [float(v) for v in re.findall(r'data-value="([^"]+)"', page.text.split("dead groups")[0])]
    assert shown == pytest.approx(rewards, rel=1e-5)
    # A finding's rollouts, rendered from the evidence artifact.
    link = hrefs(page.text, "/rollouts/")[0]
    evidence = link.split("/rollouts/")[1].split("?")[0]
    positions = [int(i) for i in link.split("at=")[1].split(",")]
    rollouts = client.get(link)
    assert rollouts.status_code == 200
    records = from_jsonl(open_store().get(evidence))
    shown_positions = [int(p) for p in re.findall(r'<div class="rollout" data-position="(\d+)">', rollouts.text)]
    assert shown_positions == positions
    texts = [html.unescape(t) for t in re.findall(r'<pre class="completion">(.*?)</pre>', rollouts.text, re.S)]
    assert texts == [records[i].text for i in positions]


def test_intervention_skills_diff_and_audit_pages(client: TestClient, seeded: Seeded) -> None:
    from evotrainer.evolve.skills import skill_library
    from evotrainer.store.audit import audit

    row = sql(seeded, "SELECT intervention_id, hypothesis, success_criterion FROM projections.interventions"
                      " WHERE experiment = 'digits' ORDER BY position LIMIT 1")[0]  # fmt: skip
    page = client.get(f"/e/digits/interventions/{row['intervention_id']}").text
    assert html.escape(row["hypothesis"]) in page and html.escape(row["success_criterion"]) in page
    decided = sql(seeded, f"SELECT decision FROM promotion_audit WHERE intervention_id = '{row['intervention_id']}'")
    assert [d["decision"] for d in decided] == re.findall(r'<td class="decision">(\w+)</td>', page)

    skills = client.get("/skills").text
    with EventStore.connect(seeded.url) as store:
        library = skill_library(store)
        report = audit(store, BranchRef("digits", "main"))
    assert library.skills
    for skill in library.skills.values():
        assert f'data-skill="{skill.skill_id}"' in skills
        assert f'<td class="num">{skill.failures}</td>' in attr_rows(skills, "data-skill")[skill.skill_id]

    branch = hrefs(page, "/b/")[-1]  # the branch that ran it (the first link is where it was proposed)
    diff = client.get(f"/harness/diff?a=digits/main&b={branch.removeprefix('/e/').replace('/b/', '/')}").text
    changes = json.loads(seeded.cli("harness", "diff", "digits/main", branch.removeprefix("/e/").replace("/b/", "/"),
                                    "--json").stdout)["changes"]  # fmt: skip
    assert changes and all(f"<code>{c['field']}</code>" in diff for c in changes)

    shown = client.get("/e/digits/b/main/audit").text
    assert f"intact: {report.branches} branches, {report.events} events verified" in shown
    assert client.get("/compare").status_code == 200


def test_the_audit_page_verifies_signed_anchors(client: TestClient, seeded: Seeded) -> None:
    from evotrainer.store.anchors import stored_anchors
    from evotrainer.store.audit import audit

    assert seeded.cli("anchor", "digits").returncode == 0
    with EventStore.connect(seeded.url) as store:
        held = [a for a in stored_anchors(store, "digits") if a.branch == "digits/main"]
        events = audit(store, BranchRef("digits", "main")).events
    page = client.get("/e/digits/b/main/audit").text
    assert held and f'class="intact">intact: 1 branches, {events} events verified, {len(held)} signed anchors hold' in page
    assert len(re.findall(r"<tr><td>digits/main</td>", page.split('id="anchors"')[1])) == len(held)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_every_write_is_refused(client: TestClient, seeded: Seeded, method: str) -> None:
    before = sql(seeded, "SELECT count(*) AS n FROM events")[0]["n"]
    for path in ("/", "/e/digits", "/e/digits/b/main", "/api/position", "/nowhere"):
        answer = client.request(method, path, content=b'{"sql": "DELETE FROM events"}')
        assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"
    assert sql(seeded, "SELECT count(*) AS n FROM events")[0]["n"] == before


def test_pages_read_in_a_read_only_transaction(seeded: Seeded) -> None:
    from psycopg import errors

    with pytest.raises(errors.ReadOnlySqlTransaction), StorePool(seeded.url).reading() as store:
        store.conn.execute("CREATE TABLE sneaky (x int)")


@pytest.mark.parametrize("path", [
    "/e/nope", "/e/digits/b/nope", "/e/bad%20name", "/e/digits/b/main/audit/x", "/e/digits/interventions/nope",
    f"/e/digits/b/main/rollouts/{'0' * 64}?at=1", "/e/digits/b/main/rollouts/x?at=a,b", "/harness/diff?a=x&b=y",
    "/harness/diff?a=digits/main&b=digits/nope", "/nowhere", "/e/nope/b/main/audit",
])  # fmt: skip
def test_bad_ids_give_a_404_page(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404, answer.text
    assert '<p id="error">' in answer.text and "Traceback" not in answer.text


def test_a_token_is_needed_when_one_is_set(seeded: Seeded) -> None:
    token = "t" * 24
    with TestClient(create_app(seeded.url, token=token)) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        first = client.get(f"/e/digits?token={token}")
        assert first.status_code == 200 and "evotrainer_token" in first.headers["set-cookie"]
        assert client.get("/e/digits/b/main").status_code == 200  # the cookie carries it now
        assert client.post(f"/?token={token}").status_code == 405


def test_the_live_position_moves_after_an_append(client: TestClient, seeded: Seeded) -> None:
    before = client.get("/api/position").json()["position"]
    with EventStore.connect(seeded.url, actor="ui-test") as store:
        store.create_experiment("live-check", {"domain": "math"})
        store.append(BranchRef("live-check", "main"), [NewEvent("TaskRequested", {
            "task_id": "t1", "kind": "train", "queue": "train", "inputs": {}})])  # fmt: skip
    after = client.get("/api/position").json()["position"]
    assert after != before
    # As the page's script does: fetch again until the page was built from projections
    # that reached the log's position (another writer's open transaction can delay them).
    deadline = time.monotonic() + 20
    while f'data-position="{after}"' not in (page := client.get("/e/live-check").text):
        assert time.monotonic() < deadline, "the projections never caught up"
        time.sleep(0.2)
    assert "train" in page.split('id="running"')[1].split("</table>")[0]  # the task in flight, shown


def test_the_static_report(seeded: Seeded, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report"
    done = seeded.cli("report", "digits", "--out", str(out))
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in out.iterdir())
    tree = json.loads(seeded.cli("lineage", "digits", "--json").stdout)
    assert files == sorted(["index.html"] + [f"branch-{b['ref'].partition('/')[2]}.html" for b in tree])
    index = (out / "index.html").read_text()
    assert "<svg" in index and "/api/position" not in index
    for link in set(hrefs(index)):
        assert (out / link).is_file(), link  # every link resolves on disk
    branch = (out / f"branch-{tree[1]['ref'].partition('/')[2]}.html").read_text()
    assert branch.count('class="curve"') == 3
    missing = seeded.cli("report", "no-such", "--out", str(tmp_path / "none"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and not (tmp_path / "none").exists()


def test_the_graph_marks_the_incumbent_incumbent_of_names(client: TestClient, seeded: Seeded) -> None:
    """The page marks the branch incumbent_of names: decisions appended by hand (not the
    gate's) make no best so far there either."""
    from evotrainer.evolve.promotion import incumbent_of

    main = BranchRef("incumbent-check", "main")
    with EventStore.connect(seeded.url, actor="ui-test") as store:
        store.create_experiment(main.experiment, {"domain": "math"})
        for name in ("a", "b"):
            store.fork(BranchRef(main.experiment, "main", 1), name)
            store.append(main, [NewEvent("PromotionDecided", {"candidate": f"{main.experiment}/{name}",
                                                              "decision": "promoted"})])  # fmt: skip
        assert incumbent_of(store, main.experiment) == main
    page = client.get("/e/incumbent-check").text
    assert 'data-ref="incumbent-check/b" data-status="incumbent"' not in page
    assert 'data-ref="incumbent-check/main"' in page and 'id="incumbent" href="/e/incumbent-check/b/main"' in page
