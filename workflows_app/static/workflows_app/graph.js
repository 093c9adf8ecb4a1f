/* The execution page's picture of its graph. ELK's layered algorithm (vendor/elk-*.bundled.js, a
   static file of this project) lays it out left to right, with edges routed orthogonally in the
   channels between the layers and around the boxes; it is drawn as SVG: one box per step, or one
   per group of sibling steps (a fan-out, grouped by the server) with its counts per state, a
   solid arrow per dependency and a dashed one per order of the code (the step was asked for
   after the workflow had awaited the other; it did not wait for it). Steps keep their name
   order within a layer (m2 before m10). The picture fits its box; the wheel and the buttons zoom,
   a drag moves it; a click on a group draws its members one by one.
   While the execution is active its states are repainted in place every few seconds; only a
   change of the structure lays it out again. This script draws and refreshes the picture only:
   when something replaces the page's content, it draws in the new box. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var CHANGE_URL_ID = "00000000-0000-0000-0000-000000000000";  /* admin.executions.CHANGE_URL_ID */
  var STATES = ["pending", "sending", "sent", "started", "rescheduled", "succeeded", "failed", "cancelled"];
  var NODE_HEIGHT = 40, GROUP_HEIGHT = 54, SHADOW = 4, MIN_HEIGHT = 120, MAX_HEIGHT = 630, PAD = 8;
  /* Below READABLE a box's 12px name is too small to read: a picture that would fit its box only
     smaller opens at READABLE on its start (left) and middle, and "fit" shows all of it. */
  var MIN_ZOOM = 0.05, MAX_ZOOM = 4, STEP_ZOOM = 1.25, READABLE = 0.7;
  var LAYOUT = {
    "elk.algorithm": "layered",
    "elk.direction": "RIGHT",
    "elk.edgeRouting": "ORTHOGONAL",
    /* The order the boxes are given in (natural name order) is kept within each layer. */
    "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
    "elk.layered.crossingMinimization.forceNodeModelOrder": "true",
    "elk.layered.considerModelOrder.components": "MODEL_ORDER",
    "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
    /* A fan-out's or fan-in's arrows share their trunk (a tree), rather than one line each. */
    "elk.layered.mergeEdges": "true",
    "elk.spacing.nodeNode": "16",
    "elk.layered.spacing.nodeNodeBetweenLayers": "40",
    "elk.spacing.edgeNode": "10",
    "elk.layered.spacing.edgeNodeBetweenLayers": "12",
    "elk.spacing.edgeEdge": "6",
    "elk.layered.spacing.edgeEdgeBetweenLayers": "6",
    "elk.spacing.componentComponent": "24",
    "elk.padding": "[top=" + PAD + ",left=" + PAD + ",bottom=" + PAD + ",right=" + PAD + "]"
  };
  var collate = new Intl.Collator("en", { numeric: true }).compare;
  var elk = null, box = null, session = 0, timer = null, current = null, st = null;

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  var html = window.switchyard.html;  /* dom.js */

  /* The box (re)appeared: a new session draws in it; the old one's answers are dropped. */
  function watch() {
    var found = document.getElementById("sy-graph");
    if (found === box) { return; }
    box = found;
    session += 1;
    window.clearTimeout(timer);
    if (!box || typeof ELK === "undefined") { return; }
    elk = elk || new ELK();
    st = { shape: null, expanded: {}, view: null, moved: false, nodes: {}, groups: [], svg: null, viewport: null,
           size: null, limit: parseInt(box.dataset.drawLimit, 10) || 300,
           refreshMs: parseInt(box.dataset.refreshMs, 10) || 2000 };
    refresh(session);
  }

  /* --- what is drawn ----------------------------------------------------------------------- */

  function groupLabel(group) {
    return group.members[0] + " \u2026 " + group.members[group.members.length - 1] + " \u00b7 " +
      group.members.length + " steps";
  }

  /* Wide enough for its name, and for its state line ("rescheduled \u00b7 local" for a local step). */
  function nodeWidth(node) {
    return Math.max(100, 7 * Math.max(node.name.length, node.local ? 15 : 11) + 24);
  }

  /* A local step runs inside the manager's pass over its execution: no agent, no message. */
  function stateLine(n) {
    return n.state + (n.local ? " \u00b7 local" : "");
  }

  function where(n) {
    return (n.local ? ", local" : "") + " on " + n.agent;
  }

  /* Boxes and arrows with the groups not opened: a member's arrows become its group's (once). */
  function model(data) {
    var groupOf = {}, boxes = [], arrows = [], byPair = {}, placed = {};
    (data.groups || []).forEach(function (group) {
      var key = group.members[0];
      if (st.expanded[key]) { return; }
      var item = { id: "g:" + key, key: key, group: group, label: groupLabel(group), height: GROUP_HEIGHT };
      item.width = Math.max(210, 7 * item.label.length + 24);
      group.members.forEach(function (member) { groupOf[member] = item; });
    });
    data.nodes.slice().sort(function (a, b) { return collate(a.name, b.name); }).forEach(function (node) {
      var group = groupOf[node.name];
      if (group) {
        if (!placed[group.id]) { placed[group.id] = true; boxes.push(group); }
      } else {
        boxes.push({ id: "n:" + node.name, key: node.name, node: node, label: node.name, width: nodeWidth(node),
                     height: NODE_HEIGHT });
      }
    });
    function arrow(kind) {
      return function (pair) {
        var from = groupOf[pair[0]] || { id: "n:" + pair[0], label: pair[0] };
        var to = groupOf[pair[1]] || { id: "n:" + pair[1], label: pair[1] };
        var key = from.id + "\u0000" + to.id;
        if (from.id === to.id) { return; }
        if (byPair[key]) { if (kind === "needs") { byPair[key].kind = kind; } return; }
        byPair[key] = { id: "e" + arrows.length, from: from, to: to, kind: kind };
        arrows.push(byPair[key]);
      };
    }
    data.edges.forEach(arrow("needs"));
    (data.order || []).forEach(arrow("order"));
    var known = {};
    boxes.forEach(function (item) { known[item.id] = true; });
    return { boxes: boxes, arrows: arrows.filter(function (a) { return known[a.from.id] && known[a.to.id]; }) };
  }

  /* The structure: only a change of it needs a new layout. */
  function shape(data) {
    return JSON.stringify([data.nodes.map(function (n) { return n.name; }), data.edges, data.order || [],
                           (data.groups || []).map(function (g) { return g.members; })]);
  }

  function layout(data, mine) {
    var drawn = model(data);
    var graph = {
      id: "root", layoutOptions: LAYOUT,
      children: drawn.boxes.map(function (item) { return { id: item.id, width: item.width, height: item.height }; }),
      edges: drawn.arrows.map(function (a) { return { id: a.id, sources: [a.from.id], targets: [a.to.id] }; })
    };
    return elk.layout(graph).then(function (placed) {
      if (mine !== session) { return; }
      render(drawn, placed, data);
    });
  }

  function pathOf(edge) {
    return (edge.sections || []).map(function (section) {
      var points = [section.startPoint].concat(section.bendPoints || [], [section.endPoint]);
      return points.map(function (p, i) { return (i ? "L" : "M") + p.x + " " + p.y; }).join(" ");
    }).join(" ");
  }

  function render(drawn, placed, data) {
    var at = {}, route = {};
    placed.children.forEach(function (child) { at[child.id] = child; });
    (placed.edges || []).forEach(function (edge) { route[edge.id] = edge; });
    var svg = el("svg", { "class": "sy-graph-svg", role: "img",
                          "aria-label": "graph of " + data.nodes.length + " operations in " + drawn.boxes.length + " boxes" });
    var defs = el("defs", {}, svg);
    var marker = el("marker", { id: "sy-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
                                markerHeight: 7, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", "class": "sy-arrow" }, marker);
    var viewport = el("g", { "class": "sy-viewport" }, svg);
    drawn.arrows.forEach(function (a) {
      var edge = route[a.id];
      if (!edge) { return; }
      el("path", { d: pathOf(edge), "class": "sy-edge sy-edge-" + a.kind, "marker-end": "url(#sy-arrow)",
                   "data-kind": a.kind, "data-from": a.from.label, "data-to": a.to.label,
                   "data-from-box": a.from.id, "data-to-box": a.to.id }, viewport);
    });
    st.nodes = {};
    st.groups = [];
    drawn.boxes.forEach(function (item) {
      var place = at[item.id];
      var transform = "translate(" + place.x + "," + place.y + ")";
      if (item.node) {
        var n = item.node;
        /* A child execution's box leads to the child's page. */
        var parent = n.child ? el("a", { href: box.dataset.changeUrl.replace(CHANGE_URL_ID, n.child) }, viewport) : viewport;
        var g = el("g", { "class": "sy-node", "data-name": n.name, "data-kind": n.kind, "data-box": item.id,
                          "data-local": n.local ? "true" : "false", transform: transform }, parent);
        el("title", {}, g);
        el("rect", { width: place.width, height: place.height, rx: 6 }, g);
        el("text", { x: place.width / 2, y: 17, "class": "sy-node-name" }, g).textContent = n.name;
        el("text", { x: place.width / 2, y: 32, "class": "sy-node-state" }, g);
        st.nodes[n.name] = g;
      } else {
        var opens = drawn.boxes.length - 1 + item.group.members.length <= st.limit;
        var group = el("g", { "class": "sy-group", "data-group": item.key, "data-box": item.id,
                              "data-members": item.group.members.length, "data-operation": item.group.operation,
                              "data-opens": opens ? "true" : "false", transform: transform }, viewport);
        el("title", {}, group);
        /* A stack of cards: the one behind is part of the size ELK routes around. */
        var w = place.width - SHADOW, h = place.height - SHADOW;
        el("rect", { x: SHADOW, y: SHADOW, width: w, height: h, rx: 6, "class": "sy-group-behind" }, group);
        el("rect", { width: w, height: h, rx: 6, "class": "sy-group-frame" }, group);
        el("text", { x: w / 2, y: 16, "class": "sy-group-name" }, group).textContent = item.label;
        el("text", { x: w / 2, y: 30, "class": "sy-group-counts" }, group);
        el("g", { "class": "sy-group-bar", transform: "translate(8,37)" }, group);
        if (opens) {
          group.addEventListener("click", function () {
            if (st.dragged) { return; }
            st.expanded[item.key] = true;
            st.moved = false;
            layout(current, session).then(function () { paint(current); });
          });
        }
        st.groups.push({ element: group, item: item, width: w - 16 });
      }
    });
    box.replaceChildren(toolbar(), svg);
    st.svg = svg;
    st.viewport = viewport;
    st.size = { width: placed.width, height: placed.height };
    var scale = Math.max(READABLE, Math.min(1, (box.clientWidth - 2 * PAD) / placed.width,
                                             (MAX_HEIGHT - 2 * PAD) / placed.height));
    svg.style.height = Math.max(MIN_HEIGHT, Math.min(MAX_HEIGHT, placed.height * scale + 2 * PAD)) + "px";
    steer(svg);
    if (!st.moved || !st.view) { home(); } else { apply(); }
  }

  function toolbar() {
    var bar = html("div", { "class": "sy-graph-tools" });
    [["\u2212", "zoom out", function () { zoomBy(1 / STEP_ZOOM); }],
     ["+", "zoom in", function () { zoomBy(STEP_ZOOM); }],
     ["fit", "show the whole graph", function () { st.moved = false; fit(); }]].forEach(function (b) {
      var button = html("button", { type: "button", "class": "sy-graph-zoom", title: b[1], "aria-label": b[1] }, b[0], bar);
      button.addEventListener("click", b[2]);
    });
    html("span", { "class": "sy-graph-scale", title: "zoom" }, "", bar);
    if (Object.keys(st.expanded).length) {
      var regroup = html("button", { type: "button", "class": "sy-graph-regroup", title: "draw each fan-out as one box again" },
                         "group fan-outs", bar);
      regroup.addEventListener("click", function () {
        st.expanded = {};
        st.moved = false;
        layout(current, session).then(function () { paint(current); });
      });
    }
    var legend = html("span", { "class": "sy-graph-legend" }, "", bar);
    html("span", { "class": "sy-legend-needs" }, "waits for", legend);
    html("span", { "class": "sy-legend-order" }, "after, in the code", legend);
    html("span", { "class": "sy-muted" }, "wheel: zoom \u00b7 drag: move" +
         (st.groups.some(function (g) { return g.element.dataset.opens === "true"; })
           ? " \u00b7 click a group to open it" : ""), legend);
    return bar;
  }

  /* --- zoom and pan ------------------------------------------------------------------------ */

  function apply() {
    var v = st.view;
    st.viewport.setAttribute("transform", "translate(" + v.x + "," + v.y + ") scale(" + v.k + ")");
    box.dataset.zoom = v.k.toFixed(3);
    var scale = box.querySelector(".sy-graph-scale");
    if (scale) { scale.textContent = Math.round(v.k * 100) + "%"; }
  }

  function fit() {
    var width = st.svg.clientWidth, height = st.svg.clientHeight;
    var k = Math.max(MIN_ZOOM, Math.min(1, width / st.size.width, height / st.size.height));
    st.view = { k: k, x: (width - st.size.width * k) / 2, y: Math.max(0, (height - st.size.height * k) / 2) };
    apply();
  }

  /* The first view: all of it when it fits readably, else its start at a readable size. */
  function home() {
    var width = st.svg.clientWidth, height = st.svg.clientHeight;
    if (Math.min(width / st.size.width, height / st.size.height) >= READABLE) { fit(); return; }
    var k = Math.min(1, Math.max(READABLE, Math.min(width / st.size.width, height / st.size.height)));
    st.view = { k: k, x: st.size.width * k <= width ? (width - st.size.width * k) / 2 : 0,
                y: (height - st.size.height * k) / 2 };
    apply();
  }

  function zoomAt(px, py, factor) {
    var v = st.view, k = Math.max(MIN_ZOOM, Math.min(MAX_ZOOM, v.k * factor));
    st.view = { k: k, x: px - (px - v.x) * k / v.k, y: py - (py - v.y) * k / v.k };
    st.moved = true;
    apply();
  }

  function zoomBy(factor) {
    zoomAt(st.svg.clientWidth / 2, st.svg.clientHeight / 2, factor);
  }

  function steer(svg) {
    svg.addEventListener("wheel", function (event) {
      event.preventDefault();
      var frame = svg.getBoundingClientRect();
      var delta = event.deltaMode === 1 ? event.deltaY * 16 : event.deltaY;
      zoomAt(event.clientX - frame.left, event.clientY - frame.top, Math.exp(-delta * 0.0015));
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) { return; }
      drag = { x: event.clientX, y: event.clientY, view: st.view };
      st.dragged = false;
    });
    /* A drag that ends on a box is not a click on it (no link followed, no group opened). */
    svg.addEventListener("click", function (event) {
      if (st.dragged) { event.preventDefault(); event.stopPropagation(); st.dragged = false; }
    }, true);
    function move(event) {
      if (!drag || !st || st.svg !== svg) { return; }
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (!st.dragged && Math.abs(dx) + Math.abs(dy) < 4) { return; }
      st.dragged = true;
      svg.classList.add("sy-dragging");
      st.view = { k: drag.view.k, x: drag.view.x + dx, y: drag.view.y + dy };
      st.moved = true;
      apply();
    }
    function end() {
      drag = null;
      svg.classList.remove("sy-dragging");
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", end);
    }
    svg.addEventListener("pointerdown", function () {
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", end);
    });
  }

  /* --- states ------------------------------------------------------------------------------ */

  /* States change in place: the boxes keep where they are; a group shows its counts per state.
     (The rest of the page follows the execution by itself: live.js.) */
  function paint(data) {
    var byName = {};
    data.nodes.forEach(function (n) { byName[n.name] = n; });
    Object.keys(st.nodes).forEach(function (name) {
      var n = byName[name], group = st.nodes[name];
      if (!n) { return; }
      group.setAttribute("class", "sy-node sy-node-" + n.state);
      group.setAttribute("data-state", n.state);
      group.querySelector("title").textContent = n.name + " (" + n.operation + where(n) + "): " + n.state;
      group.querySelector(".sy-node-state").textContent = stateLine(n);
    });
    st.groups.forEach(function (drawn) { paintGroup(drawn, byName); });
  }

  function paintGroup(drawn, byName) {
    var counts = {}, members = drawn.item.group.members;
    members.forEach(function (name) {
      var state = byName[name] ? byName[name].state : "pending";
      counts[state] = (counts[state] || 0) + 1;
    });
    var present = STATES.filter(function (state) { return counts[state]; });
    var said = present.map(function (state) { return counts[state] + " " + state; });
    var g = drawn.element;
    g.setAttribute("data-states", present.map(function (state) { return state + ":" + counts[state]; }).join(" "));
    g.setAttribute("class", "sy-group sy-group-" + (counts.failed ? "failed" : present.length === 1 ? present[0] : "mixed"));
    g.querySelector(".sy-group-counts").textContent = said.length > 3 ? said.slice(0, 3).join(" \u00b7 ") + " \u2026" : said.join(" \u00b7 ");
    g.querySelector("title").textContent = drawn.item.label + " (" + drawn.item.group.operation + "): " + said.join(", ") +
      (g.dataset.opens === "true" ? " \u2014 click to draw them one by one"
                                   : " \u2014 too many to draw one by one (" + st.limit + " boxes at most)");
    var bar = g.querySelector(".sy-group-bar"), x = 0;
    bar.replaceChildren();
    present.forEach(function (state) {
      var width = drawn.width * counts[state] / members.length;
      el("rect", { x: x, y: 0, width: width, height: 6, "class": "sy-bar-" + state }, bar);
      x += width;
    });
  }

  /* --- refreshing -------------------------------------------------------------------------- */

  function refresh(mine) {
    fetch(box.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.json(); })
      .then(function (data) {
        if (mine !== session) { return; }
        if (data.too_large) {
          box.replaceChildren(html("p", { "class": "sy-muted" },
            "The graph has grown past " + st.limit + " boxes, even with its fan-outs grouped: its summary by operation and state replaces it in a moment."));
          return;
        }
        current = data;
        var structure = shape(data);
        return (structure !== st.shape ? layout(data, mine) : Promise.resolve()).then(function () {
          if (mine !== session) { return; }
          st.shape = structure;
          paint(data);
          if (data.active) { timer = window.setTimeout(function () { refresh(mine); }, st.refreshMs); }
        });
      })
      .catch(function () {
        if (mine === session) { timer = window.setTimeout(function () { refresh(mine); }, st.refreshMs * 2); }
      });
  }

  watch();
  new MutationObserver(watch).observe(document.body, { childList: true, subtree: true });
}());
