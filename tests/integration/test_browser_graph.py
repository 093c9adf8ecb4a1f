"""The execution page's picture of its graph in a real browser (Playwright driving Debian's
``chromium``, as in test_browser.py), on one stack for every case: the demo, an imperative
workflow, a fan-out of 40 and one of 1,000.

Every arrow is computed from the SVG the page drew: an arrow for the order of imperative code, no
arrow passing through a box it does not join, fan-out members in name order, a picture that fits
its box and zooms, a fan-out of 1,000 drawn as one box with its counts. Screenshots go where
test_browser.py puts them (``SWITCHYARD_SCREENSHOTS``, or the test's own directory).
"""

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from playwright.sync_api import expect

from tests.integration.harness import NO_DATABASE_URL, WORKFLOW_MODULES, free_port
from tests.integration.test_browser import PASSWORD, browser, logged_in, screenshots, wait_http  # noqa: F401  (fixtures)
from workflows_app import services
from workflows_app.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The test workflows and the bundled demo, in every process.
MODULES = [WORKFLOW_MODULES, "workflows_app.examples"]

#: What the page drew, from its SVG: each box (step or group) as a rectangle in the picture's
#: coordinates, each arrow as its polyline, and the arrows that pass through a box they do not join.
GEOMETRY = """() => {
  const boxes = {};
  document.querySelectorAll('#sy-graph [data-box]').forEach(g => {
    const m = g.transform.baseVal.consolidate().matrix, b = g.getBBox();
    boxes[g.dataset.box] = {x: m.e + b.x, y: m.f + b.y, w: b.width, h: b.height,
                            name: g.dataset.name || g.dataset.group};
  });
  const arrows = [], crossings = [];
  document.querySelectorAll('#sy-graph path.sy-edge').forEach(path => {
    const parts = path.getAttribute('d').match(/[ML][^ML]*/g);
    const lines = [];
    let last = null;
    parts.forEach(part => {
      const [x, y] = part.slice(1).trim().split(/\\s+/).map(Number);
      if (part[0] === 'L' && last) { lines.push([last, [x, y]]); }
      last = [x, y];
    });
    const arrow = {from: path.dataset.from, to: path.dataset.to, kind: path.dataset.kind, lines};
    arrows.push(arrow);
    Object.entries(boxes).forEach(([id, r]) => {
      if (id === path.dataset.fromBox || id === path.dataset.toBox) { return; }
      const x0 = r.x + 0.5, x1 = r.x + r.w - 0.5, y0 = r.y + 0.5, y1 = r.y + r.h - 0.5;
      lines.forEach(([[ax, ay], [bx, by]]) => {
        /* Liang-Barsky: does the segment meet the rectangle? */
        let t0 = 0, t1 = 1;
        const dx = bx - ax, dy = by - ay;
        const meets = [[-dx, ax - x0], [dx, x1 - ax], [-dy, ay - y0], [dy, y1 - ay]].every(([p, q]) => {
          if (p === 0) { return q >= 0; }
          const t = q / p;
          if (p < 0) { if (t > t1) { return false; } t0 = Math.max(t0, t); }
          else { if (t < t0) { return false; } t1 = Math.min(t1, t); }
          return true;
        });
        if (meets && t0 <= t1) { crossings.push(`${arrow.from} -> ${arrow.to} crosses ${r.name}`); }
      });
    });
  });
  const svg = document.querySelector('#sy-graph svg').getBoundingClientRect();
  const drawn = document.querySelector('#sy-graph .sy-viewport').getBoundingClientRect();
  return {boxes, arrows, crossings, zoom: Number(document.getElementById('sy-graph').dataset.zoom),
          svg: {x: svg.x, y: svg.y, w: svg.width, h: svg.height},
          drawn: {x: drawn.x, y: drawn.y, w: drawn.width, h: drawn.height}};
}"""


def geometry(page):
    return page.evaluate(GEOMETRY)


def fits(shape):
    """The whole picture is inside its box."""
    svg, drawn = shape["svg"], shape["drawn"]
    return (drawn["x"] >= svg["x"] - 1 and drawn["y"] >= svg["y"] - 1 and drawn["x"] + drawn["w"] <= svg["x"] + svg["w"] + 1
            and drawn["y"] + drawn["h"] <= svg["y"] + svg["h"] + 1)


def arrows(shape, kind=None):
    return sorted((a["from"], a["to"]) for a in shape["arrows"] if kind is None or a["kind"] == kind)


def top_to_bottom(shape, names):
    """``names`` as the picture lists them from top to bottom (they share a layer: one column)."""
    placed = {box["name"]: box for box in shape["boxes"].values()}
    assert len({placed[name]["x"] for name in names}) == 1, "not one column"
    return sorted(names, key=lambda name: placed[name]["y"])


@pytest.fixture
def modules():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=MODULES):
        yield


def test_the_picture_of_a_graph_reads(stack, browser, screenshots, modules):  # noqa: F811  (fixtures)
    web_port = free_port()
    base = f"http://127.0.0.1:{web_port}"
    env = {"SWITCHYARD_WORKFLOW_MODULES": ",".join(MODULES)}
    get_user_model().objects.create_superuser("operator", "operator@localhost", PASSWORD)
    agent = stack.agent_name("local")
    stack.manage("manager", "run_manager", "--loglevel", "INFO", env=env)
    stack.manage(agent, "run_agent", agent, "--concurrency", "2", "--loglevel", "INFO",
                 env={**env, "DATABASE_URL": NO_DATABASE_URL})
    stack.manage("web", "runserver", "--noreload", f"127.0.0.1:{web_port}", env=env)
    stack.wait_for_agent(agent)
    wait_http(stack, f"{base}/admin/login/", "the web server")
    demo = services.start("demo", {"agent": agent})
    packs = services.start("it_packs", {"agent": agent, "fail": "pack-2"})
    forty = services.start("it_fan_in", {"agent": agent, "join_agent": agent, "members": 40, "seconds": 0})
    # Nobody serves this agent: its 1,000 steps stay sent, and cost the machine nothing.
    thousand = services.start("it_fan_in", {"agent": stack.agent_name("absent"), "join_agent": agent,
                                            "members": 1000, "seconds": 0})

    page = logged_in(browser, base, f"/admin/workflows_app/execution/{demo.pk}/change/")

    def snap(name):
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
        page.locator("#sy-graph").screenshot(path=str(screenshots / f"{name}-picture.png"))

    def show(execution, steps):
        page.goto(f"{base}/admin/workflows_app/execution/{execution.pk}/change/")
        expect(page.locator("#sy-graph [data-box]")).to_have_count(steps, timeout=30_000)

    # The demo, followed live: its states change in place until its last step has succeeded.
    show(demo, 11)
    expect(page.locator('g.sy-node[data-name="fan-in"]')).to_have_attribute("data-state", "succeeded", timeout=60_000)
    shape = geometry(page)
    snap("graph-demo")
    assert shape["crossings"] == []
    assert arrows(shape, "needs") == [("0:add", "1.0:add"), ("0:add", "1.1:add"), ("1.0:add", "2:xsum"),
                                      ("1.1:add", "2:xsum"), ("fan-0", "fan-in"), ("fan-1", "fan-in"),
                                      ("fan-2", "fan-in")]
    assert arrows(shape, "order") == [("2:xsum", "flaky"), ("charge", "refund"), ("flaky", "charge"),
                                      ("refund", "fan-0"), ("refund", "fan-1"), ("refund", "fan-2")]
    assert top_to_bottom(shape, ["fan-2", "fan-0", "fan-1"]) == ["fan-0", "fan-1", "fan-2"]
    assert page.locator("#sy-graph path.sy-edge-order").first.evaluate(
        "p => getComputedStyle(p).strokeDasharray") != "none"

    # The imperative workflow: fetch, then each pack after the one awaited before it (pack-2
    # failed, the code caught it, pack-3 ran all the same), then ship.
    stack.wait_for_terminal(packs.pk)
    show(packs, 5)
    shape = geometry(page)
    snap("graph-imperative")
    assert arrows(shape) == arrows(shape, "order") == [("fetch", "pack-1"), ("pack-1", "pack-2"),
                                                       ("pack-2", "pack-3"), ("pack-3", "ship")]
    assert shape["crossings"] == []
    expect(page.locator('g.sy-node[data-name="pack-3"]')).to_have_attribute("data-state", "succeeded")
    expect(page.locator('g.sy-node[data-name="pack-2"]')).to_have_attribute("data-state", "failed")

    # A fan-out of 40: one box with its counts, in a picture that fits its box.
    stack.wait_for_terminal(forty.pk)
    show(forty, 2)
    group = page.locator('g.sy-group[data-group="m0"]')
    expect(group).to_have_attribute("data-states", "succeeded:40")
    expect(group.locator("text.sy-group-name")).to_have_text("m0 \u2026 m39 \u00b7 40 steps")
    expect(group.locator("text.sy-group-counts")).to_have_text("40 succeeded")
    shape = geometry(page)
    assert fits(shape) and shape["svg"]["h"] <= 630 and shape["crossings"] == []
    assert arrows(shape) == [("m0 \u2026 m39 \u00b7 40 steps", "join")]
    snap("graph-fan-out-40")

    # Opened: 40 boxes, m0 to m39 from top to bottom, too tall to fit readably: the middle of the
    # column at a size its names can be read; "fit" shows all of it; the buttons and the wheel zoom.
    group.click()
    expect(page.locator("#sy-graph g.sy-node")).to_have_count(41)
    shape = geometry(page)
    members = [f"m{i}" for i in range(40)]
    assert top_to_bottom(shape, members[::-1]) == members
    assert shape["crossings"] == [] and shape["svg"]["h"] <= 630
    assert shape["zoom"] >= 0.7 and not fits(shape)
    snap("graph-fan-out-40-open")
    page.click("#sy-graph button[aria-label='show the whole graph']")
    shape = geometry(page)
    assert fits(shape)
    snap("graph-fan-out-40-fit")
    zoom = shape["zoom"]
    page.click("#sy-graph button[aria-label='zoom in']")
    page.click("#sy-graph button[aria-label='zoom in']")
    assert geometry(page)["zoom"] == pytest.approx(zoom * 1.25 ** 2, rel=0.01)
    page.mouse.move(700, 400)
    page.mouse.wheel(0, 400)  # down: out
    assert geometry(page)["zoom"] < zoom * 1.25 ** 2
    page.click("#sy-graph .sy-graph-regroup")
    expect(page.locator("#sy-graph g.sy-node")).to_have_count(1)

    # A fan-out of 1,000 is drawn too: one box, too big to open one by one.
    show(thousand, 2)
    group = page.locator('g.sy-group[data-group="m0"]')
    expect(group.locator("text.sy-group-name")).to_have_text("m0 \u2026 m999 \u00b7 1000 steps")
    expect(group).to_have_attribute("data-opens", "false")
    expect(group).to_have_attribute("data-states", "sent:1000", timeout=30_000)
    shape = geometry(page)
    assert fits(shape) and shape["crossings"] == []
    snap("graph-fan-out-1000")
    assert Execution.objects.get(pk=demo.pk).status == "completed"
