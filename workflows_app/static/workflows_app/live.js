/* The execution's page follows the execution while it is active. Every few seconds the page is
   fetched again — its own address, so the ?state= filter and the page= of the operations stay —
   and each part marked data-sy-live (summary, buttons, warnings, error, children, operations with
   their counts and pages, latest events, payload) is replaced by its fresh copy in one go: the
   counts, the rows and the status on screen always come from the same moment. The graph's picture
   is graph.js's and is left alone; what the operator reads stays where it is on screen.

   The admin's messages that end with the execution's status ("… is pending", from a start or an
   action) say what it is now once the page shows another status, keeping what they said.

   It works whether or not another script replaces #content-main meanwhile: it holds no element
   between two refreshes and looks each one up again. */
(function () {
  "use strict";
  var timer = null;
  var failures = 0;
  var refreshes = 0;

  function main() { return document.getElementById("content-main"); }

  function statusCell(doc) { return doc.getElementById("sy-status"); }

  function active() {
    var cell = statusCell(document);
    return Boolean(cell) && cell.dataset.active === "true";
  }

  function refreshMs() {
    var shown = main();
    return (shown && parseInt(shown.dataset.refreshMs, 10)) || 2000;
  }

  function schedule(ms) {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, ms);
  }

  /* A fresh render differs in its CSRF tokens (masked anew each time): not a change. Replacing the
     buttons only when they change keeps a click that lands during a refresh. */
  function sameContent(a, b) {
    var token = /name="csrfmiddlewaretoken" value="[^"]*"/g;
    return a.innerHTML.replace(token, "") === b.innerHTML.replace(token, "");
  }

  /* Which picture the page has: drawn, summarised (too many operations), or none. */
  function graphKind(doc) {
    return (doc.getElementById("sy-graph") ? "drawn" : "") + (doc.getElementById("sy-graph-summary") ? "summary" : "");
  }

  /* The part at the top of the window — the first whose bottom is below the window's top — and
     where it is on screen: after a refresh it is put back there, so what the operator reads stays
     in place when a part above it grows or shrinks (a warning appears, the summary changes). */
  function anchor() {
    var parts = document.querySelectorAll("#content-main [id]");
    for (var i = 0; i < parts.length; i++) {
      var box = parts[i].getBoundingClientRect();
      if (box.bottom > 0 && box.height > 0) { return { id: parts[i].id, top: box.top }; }
    }
    return null;
  }

  function keep(held, x, y) {
    var again = held && document.getElementById(held.id);
    if (again) { window.scrollBy(0, again.getBoundingClientRect().top - held.top); } else { window.scrollTo(x, y); }
  }

  function apply(fresh) {
    var x = window.scrollX, y = window.scrollY, held = anchor();
    if (graphKind(fresh) !== graphKind(document)) {
      /* The picture changed kind (it grew too big to draw, or the execution ended without an
         operation): the whole content, as the server renders it now. */
      main().replaceWith(document.importNode(fresh.getElementById("content-main"), true));
    } else {
      var parts = Array.prototype.slice.call(document.querySelectorAll("[data-sy-live]"));
      var summary = document.getElementById("sy-graph-summary");
      if (summary) { parts.push(summary); }
      parts.forEach(function (shown) {
        var next = fresh.getElementById(shown.id);
        if (next && !sameContent(shown, next)) { shown.replaceWith(document.importNode(next, true)); }
      });
    }
    keep(held, x, y);
  }

  function sayStatus() {
    var shown = main(), cell = statusCell(document);
    if (!shown || !cell) { return; }
    var now = cell.dataset.status;
    document.querySelectorAll("ul.messagelist li.sy-said").forEach(function (message) {
      if (message.textContent.indexOf(shown.dataset.execution) < 0) { return; }
      if (!message.dataset.said) {
        var said = (message.className.match(/\bsy-said-([a-z_]+)/) || [])[1];
        var text = message.textContent.trim();
        var end = text.match(/ is (now )?([a-z_]+)$/);
        if (!said || !end || end[2] !== said) { return; }
        message.dataset.said = said;
        message.dataset.original = text;
        message.dataset.head = text.slice(0, end.index);
      }
      message.textContent = now === message.dataset.said ? message.dataset.original
        : message.dataset.head + " is now " + now + " (was " + message.dataset.said + ")";
      message.classList.toggle("sy-said-past", now !== message.dataset.said);
    });
  }

  function refresh() {
    if (document.hidden) { return; }  /* visibilitychange refreshes when the page is looked at again */
    var shown = main();
    if (!shown) { return; }
    /* No redirect is followed: one leads to the login page or, for an execution deleted meanwhile,
       to the list, which would take the message meant for the operator's next page. */
    fetch(window.location.href.split("#")[0], { credentials: "same-origin", redirect: "manual", cache: "no-store",
                                                headers: { Accept: "text/html" } })
      .then(function (response) { if (!response.ok) { throw new Error(response.status); } return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var content = fresh.getElementById("content-main");
        if (!content || !statusCell(fresh) || !main() || content.dataset.execution !== main().dataset.execution) {
          throw new Error("not this execution's page");
        }
        apply(fresh);
        sayStatus();
        failures = 0;
        refreshes += 1;
        document.body.dataset.syRefreshes = String(refreshes);
        if (active()) { schedule(refreshMs()); }
      })
      .catch(function () {
        failures += 1;
        schedule(refreshMs() * Math.min(8, Math.pow(2, failures)));
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && active()) { schedule(0); }
  });
  sayStatus();
  if (active()) { schedule(refreshMs()); }
}());
