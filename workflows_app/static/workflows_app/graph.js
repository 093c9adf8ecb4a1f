/* The execution page's picture of its graph: laid out by dagre (a static file of this project),
   drawn as SVG, one box per operation labelled with its step name and state, an arrow per
   dependency. Refreshed every few seconds while the execution is active. When the execution's
   status changes, the page's content (summary, actions, operations, events) is replaced by a
   fresh copy of it, and the admin's messages above it stay: a full reload would drop the message
   an operator's start or cancel left, often before they could read it. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var CHANGE_URL_ID = "00000000-0000-0000-0000-000000000000";  /* admin.executions.CHANGE_URL_ID */
  var box, shownStatus, refreshMs, drawnShape;

  function watch() {
    box = document.getElementById("sy-graph");
    if (!box || typeof dagre === "undefined") { return; }
    shownStatus = box.dataset.status;
    refreshMs = parseInt(box.dataset.refreshMs, 10) || 2000;
    drawnShape = null;
    refresh();
  }

  /* The page as the server renders it now, in the place of the content shown; then watched again. */
  function renew() {
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content-main");
        var shown = document.getElementById("content-main");
        if (!fresh || !shown) { throw new Error("no content"); }
        shown.replaceWith(document.importNode(fresh, true));
        watch();
      })
      .catch(function () { window.location.reload(); });
  }

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function boxWidth(node) {
    return Math.max(90, 7 * Math.max(node.name.length, node.state.length) + 24);
  }

  /* The structure (names and edges): only a change of it needs a new layout. */
  function shape(data) {
    return JSON.stringify([data.nodes.map(function (n) { return n.name; }), data.edges]);
  }

  function draw(data) {
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 46, marginx: 8, marginy: 8 });
    g.setDefaultEdgeLabel(function () { return {}; });
    data.nodes.forEach(function (n) { g.setNode(n.name, { width: boxWidth(n), height: 40 }); });
    data.edges.forEach(function (e) { g.setEdge(e[0], e[1]); });
    dagre.layout(g);
    var size = g.graph();
    var svg = el("svg", { width: size.width, height: size.height, viewBox: "0 0 " + size.width + " " + size.height,
                          role: "img", "aria-label": "graph of " + data.nodes.length + " operations" });
    var defs = el("defs", {}, svg);
    var marker = el("marker", { id: "sy-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
                                markerHeight: 7, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", "class": "sy-arrow" }, marker);
    g.edges().forEach(function (e) {
      var points = g.edge(e).points;
      var d = points.map(function (p, i) { return (i ? "L" : "M") + p.x + " " + p.y; }).join(" ");
      el("path", { d: d, "class": "sy-edge", "marker-end": "url(#sy-arrow)", "data-from": e.v, "data-to": e.w }, svg);
    });
    data.nodes.forEach(function (n) {
      var at = g.node(n.name);
      /* A child execution's node leads to the child's page. */
      var parent = n.child ? el("a", { href: box.dataset.changeUrl.replace(CHANGE_URL_ID, n.child) }, svg) : svg;
      var group = el("g", { "class": "sy-node", "data-name": n.name, "data-kind": n.kind,
                            transform: "translate(" + (at.x - at.width / 2) + "," + (at.y - at.height / 2) + ")" }, parent);
      el("title", {}, group);
      el("rect", { width: at.width, height: at.height, rx: 6 }, group);
      var name = el("text", { x: at.width / 2, y: 17, "class": "sy-node-name" }, group);
      name.textContent = n.name;
      el("text", { x: at.width / 2, y: 32, "class": "sy-node-state" }, group);
    });
    box.replaceChildren(svg);
  }

  /* States change in place: the boxes keep where they are, and the operations table's badges follow. */
  function paint(data) {
    data.nodes.forEach(function (n) {
      var group = box.querySelector('g.sy-node[data-name="' + CSS.escape(n.name) + '"]');
      if (!group) { return; }
      group.setAttribute("class", "sy-node sy-node-" + n.state);
      group.setAttribute("data-state", n.state);
      group.querySelector("title").textContent = n.name + " (" + n.operation + " on " + n.agent + "): " + n.state;
      group.querySelector(".sy-node-state").textContent = n.state;
      var badge = document.querySelector('tr[data-step="' + CSS.escape(n.name) + '"] .sy-state-cell .sy-badge');
      if (badge) { badge.className = "sy-badge sy-" + n.state; badge.textContent = n.state; }
    });
  }

  function refresh() {
    fetch(box.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.json(); })
      .then(function (data) {
        if (data.status !== shownStatus || data.too_large) { renew(); return; }
        if (shape(data) !== drawnShape) { draw(data); drawnShape = shape(data); }
        paint(data);
        if (data.active) { window.setTimeout(refresh, refreshMs); }
      })
      .catch(function () { window.setTimeout(refresh, refreshMs * 2); });
  }

  watch();
}());
