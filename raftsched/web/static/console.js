// raftsched web console: follows a job page's server-sent events and updates in place its
// header (state, times, progress), the data-state of its graph nodes and table rows, a collapsed
// graph's group counts, and its timeline (fetched again, coalesced, when the job changed).
// Stops listening while the tab is hidden and reconnects with backoff. No framework, nothing
// fetched from elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var url = live.getAttribute("data-events");
  var source = null, delay = 1000, retry = null, ended = false;
  var MAX_DELAY = 30000;
  var SVG = "http://www.w3.org/2000/svg";
  var TERMINAL_JOB = (live.getAttribute("data-terminal-states") || "").split(" ");
  var byId = null;
  var RELOADED = "raftsched-reloaded:" + location.pathname;

  function setState(element, state) {
    if (element.getAttribute("data-state") !== state) { element.setAttribute("data-state", state); }
  }

  function setText(id, text) {
    var element = document.getElementById(id);
    if (element && element.textContent !== text) { element.textContent = text; }
  }

  // The page's task elements (graph nodes, table rows, failures; not the timeline's bars, whose
  // state is their attempt's), indexed once: a 2,000-task page is not searched per task.
  function elementsOf(id) {
    if (!byId) {
      byId = {};
      document.querySelectorAll("[data-task-id]:not(.bar)").forEach(function (element) {
        var key = element.getAttribute("data-task-id");
        (byId[key] = byId[key] || []).push(element);
      });
    }
    return byId[id] || [];
  }

  function applyTask(id, state, row) {
    elementsOf(id).forEach(function (element) {
      setState(element, state);
      var title = element.querySelector("title");
      if (title) { title.textContent = id + ": " + state; }
      var cell = element.querySelector(".state-cell .state");
      if (cell) { setState(cell, state); cell.textContent = state; }
      if (row && element.tagName === "TR") {
        ["attempts", "cluster", "reason"].forEach(function (name, i) {
          var td = element.querySelector("." + name + "-cell");
          if (td && td.textContent !== String(row[i])) { td.textContent = String(row[i]); }
        });
      }
    });
  }

  function applyHeader(job) {
    var state = document.getElementById("job-state");
    if (state) { setState(state, job.state); setText("job-state", job.state); }
    var header = document.getElementById("job");
    if (header) { setState(header, job.state); }
    setText("job-reason", job.reason ? "— " + job.reason : "");
    setText("job-started", job.started || "—");
    setText("job-finished", job.finished || "—");
    var bar = document.getElementById("progress");
    if (bar && job.total) { bar.max = job.total; bar.value = job.done; }
    if (job.total) { setText("progress-text", job.done + " / " + job.total + " tasks done"); }
    var cancel = document.getElementById("cancel");
    if (cancel && TERMINAL_JOB.indexOf(job.state) >= 0) { cancel.hidden = true; }
  }

  // A collapsed graph: one group per layer, [colour state, [[state, count], ...]] each: its
  // colour, its bar of state shares and its count lines are redrawn (geometry from the page).
  function svgElement(name, attributes, text) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attributes).forEach(function (k) { element.setAttribute(k, String(attributes[k])); });
    if (text) { element.textContent = text; }
    return element;
  }

  function redrawGroup(node, counts, geometry) {
    var shares = node.querySelector("g.shares"), lines = node.querySelector("g.counts");
    // As layout.shares_of: proportional, each state present at least MIN_SHARE_W wide (the
    // largest gives up the room), tiling the bar.
    var total = counts.reduce(function (sum, c) { return sum + c[1]; }, 0);
    var width = geometry.nodeW - 16, largest = 0, x = 8;
    var widths = counts.map(function (c, i) {
      if (c[1] > counts[largest][1]) { largest = i; }
      return Math.max(geometry.minShareW, Math.round(c[1] * width / total));
    });
    widths[largest] += width - widths.reduce(function (sum, w) { return sum + w; }, 0);
    shares.textContent = "";
    lines.textContent = "";
    counts.forEach(function (c, i) {
      shares.appendChild(svgElement("rect", { "class": "share", x: x, y: geometry.sharesY,
        width: widths[i], height: geometry.sharesH, "data-state": c[0] }));
      x += widths[i];
      lines.appendChild(svgElement("text", { x: 8, y: geometry.countsY + i * geometry.lineH,
        "class": "small", "data-count-state": c[0] }, c[0] + " " + c[1]));
    });
  }

  function growGroups(graph, lines, geometry) {
    var needed = geometry.countsY + geometry.lineH * (lines - 1) + 8;
    var rects = graph.querySelectorAll("g.group > rect");
    if (!rects.length || Number(rects[0].getAttribute("height")) >= needed) { return; }
    rects.forEach(function (rect) { rect.setAttribute("height", String(needed)); });
    var svg = graph.querySelector("svg"), height = needed + 20;
    svg.setAttribute("height", String(height));
    svg.setAttribute("viewBox", "0 0 " + svg.getAttribute("width") + " " + height);
  }

  function applyGroups(groups) {
    var graph = document.querySelector(".graph.collapsed");
    if (!graph) { return; }
    var geometry = { nodeW: Number(graph.getAttribute("data-node-w")),
      sharesY: Number(graph.getAttribute("data-shares-y")),
      sharesH: Number(graph.getAttribute("data-shares-h")),
      countsY: Number(graph.getAttribute("data-counts-y")),
      lineH: Number(graph.getAttribute("data-line-h")),
      minShareW: Number(graph.getAttribute("data-min-share-w")) };
    var most = 0;
    groups.forEach(function (group, layer) {
      var node = graph.querySelector('g.group[data-layer="' + layer + '"]');
      if (!node) { return; }
      setState(node, group[0]);
      most = Math.max(most, group[1].length);
      var text = group[1].map(function (c) { return c[0] + " " + c[1]; }).join("|");
      if (node.getAttribute("data-counts") === text) { return; }
      node.setAttribute("data-counts", text);
      redrawGroup(node, group[1], geometry);
    });
    growGroups(graph, most, geometry);
  }

  // The timeline is fetched again (its rendered fragment) when the job's attempts changed since
  // it was drawn (`attempts_version`): at most one fetch in flight, at most one per
  // data-refresh-ms; changes in between coalesce into the next fetch.
  var timeline = document.getElementById("timeline");
  var drawnVersion = timeline ? timeline.getAttribute("data-version") : "";
  var wantedVersion = drawnVersion, fetching = false, lastFetch = 0, timer = null;

  function refreshTimeline(version) {
    if (!timeline) { return; }
    if (version) { wantedVersion = version; }
    if (wantedVersion === drawnVersion || fetching || timer) { return; }
    var every = Number(timeline.getAttribute("data-refresh-ms") || 2000);
    var wait = Math.max(0, lastFetch + every - Date.now());
    timer = setTimeout(function () {
      timer = null;
      fetching = true;
      lastFetch = Date.now();
      var target = wantedVersion;
      fetch(timeline.getAttribute("data-src"), { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
        .then(function (html) { timeline.innerHTML = html; drawnVersion = target; })
        .catch(function () { /* the next change tries again */ })
        .then(function () { fetching = false; refreshTimeline(""); });
    }, wait);
  }

  function apply(doc) {
    var ids = Object.keys(doc.tasks);
    // a for_each task expanded: its instances have no row yet, and the page is drawn again
    // (which has them); at most once per number of tasks listed, so never in a loop
    if (ids.some(function (id) { return elementsOf(id).length === 0; }) &&
        sessionStorage.getItem(RELOADED) !== String(ids.length)) {
      sessionStorage.setItem(RELOADED, String(ids.length));
      location.reload();
      return;
    }
    ids.forEach(function (id) {
      applyTask(id, doc.tasks[id], doc.rows[id]);
    });
    if (doc.job) { applyHeader(doc.job); }
    if (doc.groups) { applyGroups(doc.groups); }
    if (doc.attempts_version) { refreshTimeline(doc.attempts_version); }
  }

  function close() { if (source) { source.close(); source = null; } }

  function open() {
    if (ended || source || document.hidden) { return; }
    source = new EventSource(url);
    live.textContent = "live";
    source.addEventListener("tasks", function (e) { delay = 1000; apply(JSON.parse(e.data)); });
    source.addEventListener("end", function () { ended = true; close(); live.textContent = "finished"; });
    source.addEventListener("failed", function () { reconnect(); });
    source.onerror = function () { reconnect(); };
  }

  function reconnect() {
    close();
    if (ended || retry) { return; }
    live.textContent = "reconnecting…";
    retry = setTimeout(function () { retry = null; open(); }, delay);
    delay = Math.min(delay * 2, MAX_DELAY);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); live.textContent = "paused"; } else { open(); }
  });
  open();
})();
