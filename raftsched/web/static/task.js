// raftsched web console, task page: follows a running attempt's output (server-sent events from
// /output/live) and appends it to the page's <pre>, keeping its last data-keep characters; when
// the attempt ends the page is reloaded once (attempts table, state). A task with no live
// attempt that is not finished follows its job's events instead and reloads when the task's
// state changes. Stops listening while the tab is hidden; reconnects with a doubling backoff,
// at most data-reconnects times in a row. Nothing fetched from elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("task-live");
  if (!live) { return; }
  var outputUrl = live.getAttribute("data-output");
  var watchUrl = live.getAttribute("data-watch");
  if (!outputUrl && !watchUrl) { return; }
  var taskId = live.getAttribute("data-task");
  var shownState = live.getAttribute("data-task-state");
  var keep = parseInt(live.getAttribute("data-keep"), 10) || 262144;
  var maxTries = parseInt(live.getAttribute("data-reconnects"), 10) || 10;
  var pre = document.getElementById("output");
  var next = outputUrl ? new URL(outputUrl, location.href).searchParams.get("offset") : null;
  var source = null, retry = null, delay = 1000, tries = 0, done = false;
  var MAX_DELAY = 30000;

  function say(text) { live.textContent = text; }

  function append(text) {
    if (!pre || pre.tagName !== "PRE") { return; }
    var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    var all = pre.textContent + text;
    pre.textContent = all.length > keep ? all.slice(all.length - keep) : all;
    if (atBottom) { pre.scrollTop = pre.scrollHeight; }
  }

  function finish(message, reload) {
    done = true;
    close();
    say(message);
    if (reload) { location.reload(); }
  }

  function urlNow() {
    if (!outputUrl) { return watchUrl; }
    var url = new URL(outputUrl, location.href);
    url.searchParams.set("offset", next);
    return url.pathname + url.search;
  }

  function listenOutput() {
    source.addEventListener("output", function (e) {
      var piece = JSON.parse(e.data);
      tries = 0; delay = 1000;
      next = String(piece.next);
      append(piece.text);
    });
    source.addEventListener("ended", function () { finish("the attempt ended", true); });
  }

  function listenWatch() {
    source.addEventListener("tasks", function (e) {
      tries = 0; delay = 1000;
      var state = JSON.parse(e.data).tasks[taskId];
      if (state && state !== shownState) { finish("the task is " + state, true); }
    });
    source.addEventListener("end", function () { finish("the job ended", false); });
  }

  function close() { if (source) { source.close(); source = null; } }

  function open() {
    if (done || source || document.hidden) { return; }
    source = new EventSource(urlNow());
    say(outputUrl ? "following the output live" : "watching the task");
    if (outputUrl) { listenOutput(); } else { listenWatch(); }
    source.addEventListener("failed", function (e) { reconnect(JSON.parse(e.data)); });
    source.onerror = function () { reconnect(""); };
  }

  function reconnect(why) {
    close();
    if (done || retry) { return; }
    if (tries >= maxTries) {
      finish("live updates stopped" + (why ? " (" + why + ")" : "") + ": reload the page", false);
      return;
    }
    tries += 1;
    say("reconnecting…" + (why ? " (" + why + ")" : ""));
    retry = setTimeout(function () { retry = null; open(); }, delay);
    delay = Math.min(delay * 2, MAX_DELAY);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); if (!done) { say("paused"); } } else { open(); }
  });
  open();
})();
