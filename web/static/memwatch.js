// memwatch dashboard: drag-to-zoom on timeline charts and live updates (server-sent
// events). Plain JavaScript, no build; every feature also works as a plain link/form.
(function () {
  "use strict";
  var tl = document.getElementById("timeline");
  if (!tl) return;
  var run = tl.dataset.run;
  var end = Number(tl.dataset.end);
  var state = { from: Number(tl.dataset.from), to: Number(tl.dataset.to), zoomed: false };
  state.zoomed = !(state.from === 0 && state.to >= end);

  function fmtNs(ns) {
    if (ns < 1e3) return ns.toFixed(0) + " ns";
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + " µs";
    if (ns < 1e9) return (ns / 1e6).toFixed(2) + " ms";
    return (ns / 1e9).toFixed(2) + " s";
  }

  function setRange(from, to) {
    from = Math.max(0, Math.floor(from));
    to = Math.min(end, Math.ceil(to));
    if (to <= from) to = from + 1;
    state.from = from; state.to = to;
    state.zoomed = !(from === 0 && to >= end);
    var f = document.querySelector("form.zoom input[name=from]");
    var t = document.querySelector("form.zoom input[name=to]");
    if (f) f.value = from;
    if (t) t.value = to;
    var label = document.getElementById("range-label");
    if (label) label.textContent = "showing " + fmtNs(from) + " – " + fmtNs(to);
    var url = "/runs/" + run + (state.zoomed ? "?from=" + from + "&to=" + to : "");
    history.replaceState(null, "", url);
    refresh();
  }

  function refresh() {
    var q = "from=" + state.from + "&to=" + state.to;
    document.querySelectorAll("figure.chart[data-device]").forEach(function (fig) {
      var box = fig.querySelector(".svgbox");
      fig.classList.add("loading");
      var src = fig.dataset.src || ("/runs/" + run + "/chart.svg?device=" + fig.dataset.device);
      fetch(src + "&" + q)
        .then(function (r) {
          if (!r.ok) throw new Error("chart request failed: " + r.status);
          fig.dataset.left = r.headers.get("x-plot-left");
          fig.dataset.right = r.headers.get("x-plot-right");
          return r.text();
        })
        .then(function (svg) { box.innerHTML = svg; })
        .catch(function (e) { box.setAttribute("title", String(e)); })
        .finally(function () { fig.classList.remove("loading"); });
    });
    var lanes = document.getElementById("lanes");
    if (lanes) {
      fetch("/runs/" + run + "/lanes?" + q)
        .then(function (r) {
          if (!r.ok) throw new Error("lanes request failed: " + r.status);
          lanes.dataset.left = r.headers.get("x-plot-left");
          lanes.dataset.right = r.headers.get("x-plot-right");
          return r.text();
        })
        .then(function (html) { lanes.innerHTML = html; attach(lanes); })
        .catch(function () {});
    }
  }

  function attach(el) {
    var box = el.querySelector(".svgbox");
    if (!box || box.dataset.bound) return;
    box.dataset.bound = "1";
    var start = null, sel = null;
    function xOf(ev) {
      var r = box.getBoundingClientRect();
      return { px: ev.clientX - r.left, scale: Number(el.dataset.width) / r.width };
    }
    function toTime(px, scale) {
      var l = Number(el.dataset.left), rr = Number(el.dataset.right);
      var x = px * scale;
      var f = Math.min(1, Math.max(0, (x - l) / Math.max(1, rr - l)));
      return state.from + f * (state.to - state.from);
    }
    box.addEventListener("pointerdown", function (ev) {
      if (ev.button !== 0) return;
      start = xOf(ev);
      sel = document.createElement("div");
      sel.className = "sel";
      sel.style.left = start.px + "px";
      sel.style.width = "0px";
      box.appendChild(sel);
      box.setPointerCapture(ev.pointerId);
      ev.preventDefault();
    });
    box.addEventListener("pointermove", function (ev) {
      if (!start) return;
      var p = xOf(ev).px;
      sel.style.left = Math.min(p, start.px) + "px";
      sel.style.width = Math.abs(p - start.px) + "px";
    });
    box.addEventListener("pointerup", function (ev) {
      if (!start) return;
      var p = xOf(ev);
      var a = Math.min(p.px, start.px), b = Math.max(p.px, start.px);
      if (sel) sel.remove();
      var s = start; start = null; sel = null;
      if (b - a < 4) {
        // A click (no drag) on a device chart opens what was live at that instant.
        if (el.dataset.device !== "lanes") {
          var at = Math.round(toTime(p.px, s.scale));
          window.location.href = "/runs/" + run + "/peak?device=" + el.dataset.device + "&at=" + at;
        }
        return;
      }
      setRange(toTime(a, s.scale), toTime(b, s.scale));
    });
  }

  document.querySelectorAll("figure.chart[data-device], #lanes").forEach(attach);

  document.querySelectorAll("[data-zoom]").forEach(function (btn) {
    btn.addEventListener("click", function (ev) {
      var span = state.to - state.from, mid = state.from + span / 2;
      var kind = btn.dataset.zoom;
      ev.preventDefault();
      if (kind === "in") setRange(mid - span / 4, mid + span / 4);
      else if (kind === "out") setRange(mid - span, mid + span);
      else setRange(0, end);
    });
  });

  if (tl.dataset.active === "true" && window.EventSource) {
    var es = new EventSource("/runs/" + run + "/live");
    es.addEventListener("progress", function (m) {
      var d = JSON.parse(m.data);
      var ev = document.getElementById("run-events");
      var du = document.getElementById("run-duration");
      if (ev) ev.textContent = d.events;
      if (du) du.textContent = d.duration;
      var newEnd = d.duration_ns + 1;
      var follow = !state.zoomed;
      end = Math.max(end, newEnd);
      if (follow) { state.to = end; }
      refresh();
    });
    es.addEventListener("end", function () {
      es.close();
      var b = document.getElementById("live-badge");
      if (b) b.textContent = "ended";
    });
  }
})();
