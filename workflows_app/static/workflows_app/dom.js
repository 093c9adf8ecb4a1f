/* What the execution page's scripts share (graph.js, timeline.js): making an element. Loaded
   before them (both are deferred, so they run in the page's order). */
(function () {
  "use strict";
  var switchyard = window.switchyard = window.switchyard || {};

  /* A new <name> element with these attributes and text, appended to parent when one is given. */
  switchyard.html = function (name, attrs, text, parent) {
    var node = document.createElement(name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  };
}());
