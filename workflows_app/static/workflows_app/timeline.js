/* The execution page's timeline: where the time went. One bar per attempt of a step, from when it
   was sent to when it ended (or to now while it has not), on the step's row; its pale start is the
   time it waited in its agent's queue before an agent started it. Colours say how it ended.
   A fan-out (the siblings the graph draws as one box) is one row whose attempts are packed
   in lanes by the server (admin/timeline.py); a click on its name opens it, one row per member.
   The first rows are shown, then more on demand: 1,000 steps read as well as 10.
   Hovering a bar names its step, attempt, agent (a local step's: the manager's queue, "(local)"),
   times, duration, outcome and error type.

   While the execution is active the JSON is fetched again every few seconds (as the graph's; a
   second more per 500 attempts); only the rows that changed are replaced, so a tooltip being read
   stays. The axis keeps some room ahead of now, so a running bar grows towards its end rather
   than the axis shrinking under it at every refresh. This script draws the timeline only; when something replaces the page's
   content (live.js), it draws in the new box. */
(function () {
  "use strict";
  var OUTCOMES = ["succeeded", "failed", "rescheduled", "cancelled", "running", "waiting"];
  var SAID = { succeeded: "succeeded", failed: "failed", rescheduled: "failed, to be retried",
               cancelled: "cancelled", running: "running", waiting: "waiting to start" };
  var PAGE = 50;          /* rows shown at first, and added by "show more" */
  var TICK_PX = 110;      /* about one tick of the axis per this many pixels */
  var LANE_PX = 5, ROW_PX = 20;
  var STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800];
  var box = null, session = 0, timer = null, st = null;

  var html = window.switchyard.html;  /* dom.js */

  /* The box (re)appeared: a new session draws in it; the old one's answers are dropped. */
  function watch() {
    var found = document.getElementById("sy-timeline");
    if (found === box) { return; }
    box = found;
    session += 1;
    window.clearTimeout(timer);
    if (!box) { return; }
    st = { data: null, open: {}, shown: PAGE, axisEnd: null, keys: null, refreshes: 0,
           refreshMs: parseInt(box.dataset.refreshMs, 10) || 2000 };
    refresh(session);
  }

  /* --- words ------------------------------------------------------------------------------- */

  function pad(n, width) { return String(n).padStart(width || 2, "0"); }

  /* A moment, seconds after the origin, on the server's clock (its time zone, as the page's). */
  function clock(t, withDate) {
    var d = new Date(st.originMs + (t + st.data.tz_offset) * 1000);
    var time = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
    return withDate ? d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + time
                    : time + "." + pad(d.getUTCMilliseconds(), 3);
  }

  function duration(s) {
    if (s < 10) { return s.toFixed(2) + " s"; }
    if (s < 60) { return s.toFixed(1) + " s"; }
    if (s < 3600) { return Math.floor(s / 60) + "m " + pad(Math.floor(s % 60)) + "s"; }
    return Math.floor(s / 3600) + "h " + pad(Math.floor((s % 3600) / 60)) + "m";
  }

  function tickLabel(s, step) {
    if (step < 1) { return s.toFixed(1) + "s"; }
    if (s < 60) { return Math.round(s) + "s"; }
    if (s < 3600) { var m = Math.floor(s / 60), rest = Math.round(s % 60); return m + "m" + (rest ? pad(rest) + "s" : ""); }
    var h = Math.floor(s / 3600), min = Math.round((s % 3600) / 60);
    return h + "h" + (min ? pad(min) + "m" : "");
  }

  function barTitle(step, bar) {
    var end = bar.end === undefined ? st.data.until : bar.end;
    var lines = [step.name + " \u00b7 attempt " + bar.attempt + " \u00b7 agent " + (bar.agent || step.agent || "\u2014") +
                 (step.local ? " (local)" : "")];
    var times = ["sent " + clock(bar.start)];
    if (bar.run !== undefined) { times.push("started " + clock(bar.run)); }
    times.push(bar.end === undefined ? "not ended (" + clock(end) + ")" : "ended " + clock(bar.end));
    lines.push(times.join(" \u00b7 "));
    var queued = (bar.run === undefined ? end : bar.run) - bar.start;
    if (bar.run !== undefined) {
      lines.push((bar.end === undefined ? "running for " : "ran ") + duration(end - bar.run) +
                 (queued >= 0.005 ? ", after " + duration(queued) + " in its queue" : "") +
                 " \u00b7 " + duration(end - bar.start) + " in all");
    } else {
      lines.push((bar.end === undefined ? "waiting to start for " : "never started: waited ") + duration(queued));
    }
    lines.push(SAID[bar.outcome] + (bar.reset ? " (taken back by a resume and sent again)" : "") +
               (bar.error ? " \u00b7 " + bar.error : ""));
    return lines.join("\n");
  }

  /* --- drawing ----------------------------------------------------------------------------- */

  function pct(t) { return (100 * t / st.axisEnd).toFixed(4) + "%"; }

  /* Where the axis ends: at the end once the execution has ended; while it runs, ahead of now, moved
     on (by a quarter more) only when now reaches it. */
  function axisEnd(data) {
    var last = data.until || 0;
    data.rows.forEach(function (row) {
      (row.members || [row]).forEach(function (step) {
        step.bars.forEach(function (bar) { last = Math.max(last, bar.end === undefined ? 0 : bar.end); });
      });
    });
    last = Math.max(last, 0.001);
    if (!data.active) { return last; }
    if (st.axisEnd && st.axisEnd >= last && st.axisEnd <= last * 2 + 10) { return st.axisEnd; }
    return Math.max(last * 1.25, last + 5);
  }

  function tickStep(width) {
    var wanted = st.axisEnd / Math.max(1, Math.floor(width / TICK_PX));
    for (var i = 0; i < STEPS.length; i += 1) { if (STEPS[i] >= wanted) { return STEPS[i]; } }
    return STEPS[STEPS.length - 1];
  }

  function barElement(step, bar, lane, top) {
    var end = bar.end === undefined ? st.data.until : bar.end;
    var node = html("div", { "class": "sy-tl-bar sy-tl-" + bar.outcome, "data-step": step.name,
                             "data-attempt": bar.attempt, "data-outcome": bar.outcome,
                             "data-seconds": (end - bar.start).toFixed(3), title: barTitle(step, bar) });
    /* In a group's lanes, a bar is its run (its members wait in their queue all together). */
    var from = lane !== undefined && bar.run !== undefined ? bar.run : bar.start;
    node.style.left = pct(from);
    node.style.width = pct(Math.max(0, end - from));
    if (lane !== undefined) { node.style.top = (lane * LANE_PX + top) + "px"; }
    var queued = (bar.run === undefined ? end : bar.run) - bar.start;
    if (lane === undefined && bar.outcome !== "waiting" && queued > 0 && end > bar.start) {
      html("span", { "class": "sy-tl-queued" }, "", node).style.width = (100 * queued / (end - bar.start)).toFixed(2) + "%";
    }
    return node;
  }

  function stepRow(step, member) {
    var row = html("div", { "class": "sy-tl-row sy-tl-step" + (member ? " sy-tl-member" : ""), "data-step": step.name,
                            "data-state": step.state || "", "data-local": step.local ? "true" : "false" });
    /* A local step ran inside the manager's pass over the execution: no agent, no message. */
    var label = html("div", { "class": "sy-tl-label",
                              title: step.name + (step.operation ? " (" + step.operation + (step.local ? ", local" : "") +
                                                  " on " + step.agent + ")" : "") +
                                     (step.state ? ": " + step.state : "") }, "", row);
    html("span", { "class": "sy-tl-name" }, step.name, label);
    var notes = (step.local ? ["local"] : []).concat(step.bars.length > 1 ? [step.bars.length + " attempts"] : []);
    if (notes.length) { html("span", { "class": "sy-tl-note" }, notes.join(" \u00b7 "), label); }
    var track = html("div", { "class": "sy-tl-track" }, "", row);
    step.bars.forEach(function (bar) { track.appendChild(barElement(step, bar)); });
    if (!step.bars.length) {
      html("span", { "class": "sy-tl-none" }, step.state === "pending" ? "not sent yet" : (step.state || "") + ", never sent", track);
    }
    return row;
  }

  function groupRow(group) {
    var open = Boolean(st.open[group.group]);
    var counts = {}, attempts = 0;
    group.members.forEach(function (step) {
      step.bars.forEach(function (bar) { counts[bar.outcome] = (counts[bar.outcome] || 0) + 1; attempts += 1; });
    });
    var said = OUTCOMES.filter(function (o) { return counts[o]; }).map(function (o) { return counts[o] + " " + o; });
    var row = html("div", { "class": "sy-tl-row sy-tl-group", "data-group": group.group, "data-lanes": group.lanes,
                            "data-open": open ? "true" : "false", "data-attempts": attempts });
    var label = html("button", { type: "button", "class": "sy-tl-label", "aria-expanded": open ? "true" : "false",
                                 title: group.label + " (" + group.operation + "): " + attempts + " attempts" +
                                        (said.length ? ", " + said.join(", ") : "") +
                                        (open ? " \u2014 click to draw them as one row" : " \u2014 click to draw them one by one") },
                     "", row);
    html("span", { "class": "sy-tl-name" }, (open ? "\u25be " : "\u25b8 ") + group.label, label);
    html("span", { "class": "sy-tl-note" }, said.join(" \u00b7 ") || "not sent yet", label);
    label.addEventListener("click", function () {
      if (open) { delete st.open[group.group]; } else { st.open[group.group] = true; }
      draw(true);
    });
    var track = html("div", { "class": "sy-tl-track" }, "", row);
    var height = Math.max(ROW_PX, group.lanes * LANE_PX + 4), top = (height - group.lanes * LANE_PX) / 2;
    track.style.height = height + "px";
    group.members.forEach(function (step) {
      step.bars.forEach(function (bar) { track.appendChild(barElement(step, bar, bar.lane || 0, top)); });
    });
    return row;
  }

  function axisRow(width) {
    var row = html("div", { "class": "sy-tl-row sy-tl-axis" });
    var d = st.data;
    html("div", { "class": "sy-tl-label sy-muted", title: "the times of the axis count from this moment" },
         "from " + clock(0, true), row);
    var track = html("div", { "class": "sy-tl-track" }, "", row);
    var step = tickStep(width);
    box.style.setProperty("--sy-tl-tick", (100 * step / st.axisEnd).toFixed(4) + "%");
    /* A tick too near the end for its label to fit is a line only (the tracks' lines). */
    for (var t = 0; (st.axisEnd - t) / st.axisEnd * width >= 36; t += step) {
      html("span", { "class": "sy-tl-tick" }, tickLabel(t, step), track).style.left = pct(t);
    }
    if (d.active) {
      html("span", { "class": "sy-tl-mark sy-tl-now", title: "now" }, "now", track).style.left = pct(d.until);
    } else if (d.ended !== null && d.ended !== undefined) {
      html("span", { "class": "sy-tl-mark sy-tl-end", title: "the execution ended, " + clock(d.ended) }, "end", track)
        .style.left = pct(d.ended);
    }
    return row;
  }

  function tools(visible) {
    var d = st.data, bar = html("div", { "class": "sy-tl-tools" });
    var counts = {};
    d.rows.forEach(function (row) {
      (row.members || [row]).forEach(function (step) {
        step.bars.forEach(function (b) { counts[b.outcome] = (counts[b.outcome] || 0) + 1; });
      });
    });
    html("span", { "class": "sy-tl-summary" }, d.attempts + " attempt" + (d.attempts === 1 ? "" : "s") + " of " +
         d.steps + " step" + (d.steps === 1 ? "" : "s") + " \u00b7 " + duration(d.ended === null || d.ended === undefined
           ? d.until : d.ended) + (d.active ? " so far" : ""), bar);
    if (Object.keys(st.open).length) {
      var close = html("button", { type: "button", "class": "sy-tl-close", title: "draw each fan-out as one row again" },
                       "group fan-outs", bar);
      close.addEventListener("click", function () { st.open = {}; draw(true); });
    }
    var legend = html("span", { "class": "sy-tl-legend" }, "", bar);
    OUTCOMES.forEach(function (outcome) {
      html("span", { "class": "sy-tl-key sy-tl-key-" + outcome + (counts[outcome] ? "" : " sy-tl-key-none"),
                     "data-outcome": outcome },
           SAID[outcome] + " " + (counts[outcome] || 0), legend);
    });
    html("span", { "class": "sy-tl-key sy-tl-key-queued", title: "the start of a bar: sent, not yet started by an agent" },
         "in the queue", legend);
    return bar;
  }

  function footer(total) {
    var foot = html("div", { "class": "sy-tl-more" });
    if (total <= st.shown) { return foot; }
    html("span", { "class": "sy-muted" }, "showing " + st.shown + " of " + total + " rows", foot);
    var more = html("button", { type: "button", "class": "sy-tl-show-more" }, "show " + Math.min(PAGE, total - st.shown) + " more", foot);
    more.addEventListener("click", function () { st.shown += PAGE; draw(true); });
    var all = html("button", { type: "button", "class": "sy-tl-show-all" }, "show all", foot);
    all.addEventListener("click", function () { st.shown = total; draw(true); });
    return foot;
  }

  /* The rows shown: each group, and its members when it is open. */
  function visibleRows() {
    var list = [];
    st.data.rows.forEach(function (row) {
      if (!row.members) { list.push({ key: "s:" + row.name, make: function () { return stepRow(row, false); } }); return; }
      list.push({ key: "g:" + row.group, make: function () { return groupRow(row); } });
      if (st.open[row.group]) {
        row.members.forEach(function (step) {
          list.push({ key: "s:" + step.name, make: function () { return stepRow(step, true); } });
        });
      }
    });
    return list;
  }

  /* Draw the timeline; ``whole``: anew, else only the rows whose drawing changed. */
  function draw(whole) {
    var d = st.data;
    if (d.too_large) {
      box.dataset.attempts = "";
      box.replaceChildren(html("p", { "class": "sy-muted" }, "More than " + d.limit +
        " attempts: too many to draw on a timeline. The operations are listed below."));
      st.keys = null;
      return;
    }
    st.originMs = Date.parse(d.origin);
    st.axisEnd = axisEnd(d);
    var list = visibleRows(), shown = list.slice(0, st.shown);
    var keys = shown.map(function (item) { return item.key; }).join("\n");
    var chart = box.querySelector(".sy-tl-chart");
    var width = chart ? chart.querySelector(".sy-tl-track").clientWidth : box.clientWidth - 240;
    var rows = shown.map(function (item) { return item.make(); });
    box.dataset.attempts = d.attempts;
    box.dataset.active = d.active ? "true" : "false";
    if (!whole && chart && keys === st.keys) {
      var old = chart.querySelectorAll(":scope > .sy-tl-row");
      var axis = axisRow(width);
      if (old[0].outerHTML !== axis.outerHTML) { old[0].replaceWith(axis); }
      rows.forEach(function (row, i) { if (old[i + 1].outerHTML !== row.outerHTML) { old[i + 1].replaceWith(row); } });
      var bar = tools();
      var shownTools = box.querySelector(".sy-tl-tools");
      if (shownTools.outerHTML !== bar.outerHTML) { shownTools.replaceWith(bar); }
      var foot = footer(list.length), shownFoot = box.querySelector(".sy-tl-more");
      if (shownFoot.outerHTML !== foot.outerHTML) { shownFoot.replaceWith(foot); }
      return;
    }
    var scroll = chart ? chart.scrollTop : 0;
    chart = html("div", { "class": "sy-tl-chart", role: "img",
                          "aria-label": "timeline of " + d.attempts + " attempts of " + d.steps + " steps" });
    chart.appendChild(axisRow(width));
    rows.forEach(function (row) { chart.appendChild(row); });
    box.replaceChildren(tools(), chart, footer(list.length));
    chart.scrollTop = scroll;
    st.keys = keys;
  }

  /* --- refreshing -------------------------------------------------------------------------- */

  /* A timeline of thousands of attempts is read less often: a second more per 500 attempts. */
  function interval(data) {
    return st.refreshMs + 1000 * Math.floor((data.attempts || 0) / 500);
  }

  /* The next refresh in ``ms``; while the page is not looked at, when it is again. */
  function later(mine, ms) {
    timer = window.setTimeout(function () {
      if (!document.hidden) { refresh(mine); return; }
      document.addEventListener("visibilitychange", function wake() {
        if (document.hidden) { return; }
        document.removeEventListener("visibilitychange", wake);
        refresh(mine);
      });
    }, ms);
  }

  function refresh(mine) {
    if (mine !== session) { return; }
    fetch(box.dataset.url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.json(); })
      .then(function (data) {
        if (mine !== session) { return; }
        var first = st.data === null;
        st.data = data;
        draw(first);
        st.refreshes += 1;
        box.dataset.refreshes = String(st.refreshes);
        /* Past the limit it stays past it (attempts are never taken away): no more reads. */
        if (data.active && !data.too_large) { later(mine, interval(data)); }
      })
      .catch(function () {
        if (mine === session) { later(mine, st.refreshMs * 2); }
      });
  }

  watch();
  new MutationObserver(watch).observe(document.body, { childList: true, subtree: true });
}());
