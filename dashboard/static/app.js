// skiplock dashboard: the two uPlot charts. Everything else is server-rendered
// HTML refreshed by htmx. No inline script: the page's CSP forbids it.
(function () {
  "use strict";
  var charts = [];
  var REFRESH_MS = 5000;

  function opts(kind, width) {
    var common = {
      width: width, height: 230,
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
      axes: [{ stroke: "#6b7280", grid: { stroke: "#eceef2" } }, { stroke: "#6b7280", grid: { stroke: "#eceef2" } }],
    };
    if (kind === "throughput") {
      common.series = [
        {},
        { label: "claimed/s", stroke: "#2952cc", width: 2 },
        { label: "completed/s", stroke: "#1a7f4b", width: 2 },
        { label: "failed/s", stroke: "#b42318", width: 1.5 },
      ];
    } else {
      common.series = [
        {},
        { label: "queue lag (s)", stroke: "#a15c00", width: 2, scale: "s" },
        { label: "claim p99 (ms)", stroke: "#7c3aed", width: 1.5, scale: "ms" },
      ];
      common.scales = { s: { auto: true }, ms: { auto: true } };
      common.axes = [
        common.axes[0],
        { scale: "s", stroke: "#a15c00", grid: { stroke: "#eceef2" }, values: function (u, v) { return v.map(function (x) { return x + "s"; }); } },
        { scale: "ms", side: 1, stroke: "#7c3aed", grid: { show: false }, values: function (u, v) { return v.map(function (x) { return x + "ms"; }); } },
      ];
    }
    return common;
  }

  function columns(kind, s) {
    if (kind === "throughput") return [s.t, s.claimed, s.completed, s.failed];
    return [s.t, s.lag, s.claim_p99_ms];
  }

  function load(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (r) {
      if (!r.ok) throw new Error("series: HTTP " + r.status);
      return r.json();
    });
  }

  function refresh() {
    if (!charts.length) return;
    load(charts[0].url).then(function (s) {
      charts.forEach(function (c) { c.plot.setData(columns(c.kind, s)); });
    }).catch(function () { /* keep the last picture; the next tick retries */ });
  }

  function init() {
    if (typeof uPlot === "undefined") return;
    var els = document.querySelectorAll(".chart[data-series]");
    if (!els.length) return;
    var url = els[0].getAttribute("data-series");
    load(url).then(function (s) {
      els.forEach(function (el) {
        var kind = el.getAttribute("data-kind");
        var plot = new uPlot(opts(kind, Math.max(300, el.clientWidth)), columns(kind, s), el);
        charts.push({ el: el, kind: kind, plot: plot, url: url });
      });
      setInterval(refresh, REFRESH_MS);
      window.addEventListener("resize", function () {
        charts.forEach(function (c) { c.plot.setSize({ width: Math.max(300, c.el.clientWidth), height: 230 }); });
      });
    }).catch(function () {});
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
