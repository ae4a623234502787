// raftsched web console: follows a job page's server-sent events and updates the data-state of
// its graph nodes and table rows in place. Stops listening while the tab is hidden and
// reconnects with backoff. No framework, nothing fetched from elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var url = live.getAttribute("data-events");
  var source = null, delay = 1000, retry = null, ended = false;
  var MAX_DELAY = 30000;

  function setState(element, state) {
    if (element.getAttribute("data-state") !== state) { element.setAttribute("data-state", state); }
  }

  function apply(doc) {
    Object.keys(doc.tasks).forEach(function (id) {
      var state = doc.tasks[id];
      var selector = '[data-task-id="' + CSS.escape(id) + '"]';
      document.querySelectorAll(selector).forEach(function (element) {
        setState(element, state);
        var title = element.querySelector("title");
        if (title) { title.textContent = id + ": " + state; }
        var cell = element.querySelector(".state-cell .state");
        if (cell) { setState(cell, state); cell.textContent = state; }
        var row = doc.rows[id];
        if (row && element.tagName === "TR") {
          ["attempts", "cluster", "reason"].forEach(function (name, i) {
            var td = element.querySelector("." + name + "-cell");
            if (td) { td.textContent = String(row[i]); }
          });
        }
      });
    });
    var job = document.getElementById("job-state");
    if (job) { setState(job, doc.job_state); job.textContent = doc.job_state; }
    var cancel = document.getElementById("cancel");
    if (cancel && ["SUCCEEDED", "FAILED", "CANCELLED"].indexOf(doc.job_state) >= 0) { cancel.hidden = true; }
    var done = 0, total = 0;
    Object.keys(doc.counts).forEach(function (s) {
      total += doc.counts[s];
      if (["SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED"].indexOf(s) >= 0) { done += doc.counts[s]; }
    });
    var bar = document.getElementById("progress");
    if (bar && total) { bar.value = done; }
    var text = document.getElementById("progress-text");
    if (text && total) { text.textContent = done + " / " + total + " tasks done"; }
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
