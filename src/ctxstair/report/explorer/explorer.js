// The ctxstair explorer: draws a run, a language-model run or a sweep from the JSON payload that
// ctxstair.report.explorer wrote into this page. Everything it needs is in the page (plotly.js
// above, the data below); it fetches nothing.
//
// window.explorer is the page's state for tests and the console: kind, data, index (the snapshot
// shown), show(i) (moves the slider; a promise), timings (milliseconds of each redraw, from the
// slider's change until every plot has redrawn), ready and readyAt (performance.now() when the
// page first became interactive), scriptAt (performance.now() when this script began: what came
// before it is reading the file and compiling plotly.js).
"use strict";
(function () {
  const scriptAt = performance.now();
  const D = JSON.parse(document.getElementById("explorer-data").textContent);
  const app = document.getElementById("app");
  const PLOT = { displaylogo: false, responsive: false };
  const PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"];
  const explorer = { kind: D.kind, data: D, index: 0, timings: [], ready: false, readyAt: null, scriptAt: scriptAt,
                     show: null };
  window.explorer = explorer;

  function element(tag, attributes, parent, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function header() {
    element("h1", {}, app, D.title);
    const lead = element("p", { class: "lead" }, app);
    lead.innerHTML = D.lead || "";  // HTML written by ctxstair.report.explorer.page.typeset: escaped, sub/superscripts
    if (D.report) {
      lead.appendChild(document.createTextNode(" "));
      element("a", { href: D.report }, lead, "The static report with the key numbers.");
    }
  }

  function row() { return element("div", { class: "row" }, app); }
  function panel(parent, id) { return element("div", { id: id, class: "panel" }, parent); }
  const column = (points, j) => points.map((p) => p[j]);
  const title = (text) => ({ text: text, font: { size: 13 } });

  // ------------------------------------------------------------------ shared pieces

  // The token labels are the axes' titles; automargin keeps long ones (words) clear of the plot.
  function heatmap(id, z, labels, heading, width) {
    const axis = { type: "category", tickfont: { size: 8 }, automargin: true };
    return Plotly.newPlot(id, [{
      type: "heatmap", z: z, x: labels, y: labels, zmin: -1, zmax: 1, colorscale: "RdBu",
      hovertemplate: "tokens %{y} and %{x}<br>cosine %{z:.4f}<extra></extra>",
      colorbar: { title: { text: "cosine" }, thickness: 12 },
    }], {
      title: title(heading), width: width || 400, height: (width || 400) + 10, margin: { l: 40, r: 10, t: 64, b: 40 },
      xaxis: axis, yaxis: Object.assign({ autorange: "reversed" }, axis),
    }, PLOT);
  }

  // The curves use a log time axis, where time 0 (the initialization) has no place: its cursor
  // stands at the first positive time, and the time label says so. The cursor is a line laid over
  // the plot, placed from the axis range Plotly writes back into the layout: moving it costs
  // nothing, where a Plotly relayout of a shape redraws the whole plot (20 ms each here).
  const cursors = [];

  function curvesPanel(parent, id) {
    const holder = element("div", { class: "curves" }, parent);
    panel(holder, id);
    cursors.push({ plot: id, line: element("div", { id: `${id}-cursor`, class: "cursor" }, holder) });
  }

  const xlog = D.xlog !== false;

  function placeCursors(t) {
    const positive = D.times.filter((s) => s > 0);
    const x = xlog ? Math.log10(t > 0 ? t : (positive.length ? positive[0] : 1)) : t;
    for (const cursor of cursors) {
      // _fullLayout holds the drawn plot area (margins grown for the legend) and range: Plotly's own
      // state, pinned with the plotly package.
      const full = document.getElementById(cursor.plot)._fullLayout;
      const [low, high] = full.xaxis.range, area = full._size;
      const left = area.l + ((x - low) / (high - low)) * area.w;
      Object.assign(cursor.line.style, { left: `${left}px`, top: `${area.t}px`, height: `${area.h}px` });
      cursor.line.dataset.time = String(t);
    }
  }

  // Ticks 1, 2, 5 × 10^k inside a log axis's range (log10 units), written out in full (Plotly's own
  // log ticks label 20 and 30 as "2" and "3"), and the first and last state's time, so that a short
  // series has its ends marked; a range within one decade gets every digit. Fewer than two such
  // ticks (a narrow range): Plotly's own, which are then decimals.
  function logTicks(range, extra) {
    const within = (value) => Math.log10(value) >= range[0] - 1e-9 && Math.log10(value) <= range[1] + 1e-9;
    const ticks = new Set((extra || []).filter((v) => v > 0 && within(v)));
    const digits = range[1] - range[0] < 1 ? [1, 2, 3, 4, 5, 6, 7, 8, 9] : [1, 2, 5];
    for (let power = Math.floor(range[0]); power <= Math.ceil(range[1]); power++) {
      for (const digit of digits) {
        const value = Number((digit * Math.pow(10, power)).toPrecision(6));
        if (within(value)) ticks.add(value);
      }
    }
    const values = Array.from(ticks).sort((a, b) => a - b);
    return values.length >= 2 ? { tickmode: "array", tickvals: values } : {};
  }

  // The log10 range of the positive values of the traces' y.
  function valueRange(traces) {
    const ys = [].concat(...traces.map((trace) => trace.y)).filter((y) => y > 0);
    return ys.length ? [Math.log10(Math.min(...ys)), Math.log10(Math.max(...ys))] : [0, 1];
  }

  function positiveRange(traces) {
    const xs = D.times.concat(...traces.map((trace) => trace.x)).filter((x) => x > 0);
    return xs.length ? [Math.log10(Math.min(...xs)), Math.log10(Math.max(...xs))] : [0, 1];
  }

  function positiveTimes(series) {
    const keep = series.x.map((x, i) => i).filter((i) => series.x[i] > 0 || !xlog);
    return { x: keep.map((i) => series.x[i]), y: keep.map((i) => series.y[i]) };
  }

  // options: Plotly layout settings, and xrange (the x axis's fixed range, in the axis's own units).
  function curvesPlot(id, traces, heading, ylabel, options) {
    const unit = D.unit;
    const layout = Object.assign({}, options || {});
    const range = layout.xrange;
    delete layout.xrange;
    const xaxis = xlog ? Object.assign({ type: "log", title: { text: `${unit} (log scale; the initialization, ${unit} 0, is not shown)` } },
                                       logTicks(range || positiveRange(traces), [D.times[0], D.times[D.times.length - 1]]))
      : { type: "linear", title: { text: `${unit}s in order` }, tickmode: "array", tickvals: D.times, ticktext: D.ticks || D.times,
          zeroline: false };  // positions 0, 1, ...: a zero line at the first state would look like a cursor
    if (range) xaxis.range = range;
    return Plotly.newPlot(id, traces, Object.assign({
      title: title(heading), width: 780, height: 340, margin: { l: 70, r: 20, t: 50, b: 50 }, xaxis: xaxis,
      yaxis: { title: { text: ylabel } },
      legend: { orientation: "h", y: -0.25, font: { size: 11 } },
    }, layout), PLOT);
  }

  function pcaRanges(frames) {
    let bound = 0;
    for (const frame of frames) for (const point of frame) bound = Math.max(bound, Math.abs(point[0]), Math.abs(point[1]));
    bound = 1.12 * (bound || 1);
    return [-bound, bound];
  }

  function controls(extra) {
    const bar = element("div", { id: "controls" }, app);
    const play = element("button", { id: "play", type: "button" }, bar, "▶ play");
    const slider = element("input", { id: "time-slider", type: "range", min: 0, max: D.times.length - 1, step: 1,
                                       value: 0, "aria-label": `snapshot (${D.unit})` }, bar);
    const label = element("span", { id: "time-label" }, bar);
    (extra || []).forEach((build) => build(bar));
    let timer = null;
    const stop = () => { clearInterval(timer); timer = null; play.textContent = "▶ play"; };
    play.addEventListener("click", () => {
      if (timer) { stop(); return; }
      if (explorer.index >= D.times.length - 1) explorer.show(0);
      play.textContent = "❚❚ pause";
      timer = setInterval(() => {
        if (explorer.index >= D.times.length - 1) { stop(); return; }
        explorer.show(explorer.index + 1);
      }, 450);
    });
    slider.addEventListener("input", () => explorer.show(Number(slider.value)));
    return { slider: slider, label: label };
  }

  function select(bar, id, text, options, chosen, onChange) {
    const label = element("label", { for: id }, bar);
    label.innerHTML = text + " ";  // the page's own fixed words, with sub/superscripts
    const box = element("select", { id: id }, label);
    for (const [value, name] of options) {
      const option = element("option", { value: String(value) }, box, name);
      if (String(value) === String(chosen)) option.selected = true;
    }
    box.addEventListener("change", () => onChange(box.value));
    return box;
  }

  // The PCA view switch: one basis for all snapshots, or each snapshot's own aligned by Procrustes.
  function pcaSelect(bar, mode, setMode) {
    const state = D.kind === "run" ? "snapshot" : "state";  // an LM output's states need not be snapshots
    return select(bar, "pca-mode", "PCA", [["fixed", `one basis for all ${state}s`],
                                           ["procrustes", `each ${state}'s own, Procrustes-aligned`]], mode, (v) => {
      setMode(v);
      Plotly.relayout("pca", { "xaxis.range": pcaRanges(D.pca[v]), "yaxis.range": pcaRanges(D.pca[v]) });
      explorer.show(explorer.index);
    });
  }

  function valueAt(series, t) {
    const i = series.x.indexOf(t);
    return i >= 0 ? series.y[i] : null;
  }

  const fmt = (v) => (v === null || v === undefined ? "—" : Number(v).toFixed(3));

  // Every redraw is timed from the request until all plots have redrawn.
  function timed(draw) {
    return async function (i) {
      const started = performance.now();
      i = Math.max(0, Math.min(D.times.length - 1, Math.round(i)));
      explorer.index = i;
      await Promise.all(draw(i));
      explorer.timings.push(performance.now() - started);
    };
  }

  function markReady(plots) {
    return Promise.all(plots).then(() => {
      explorer.ready = true;
      explorer.readyAt = performance.now();
      document.body.setAttribute("data-ready", "true");
    });
  }

  // ------------------------------------------------------------------ a run

  function runPage() {
    header();
    let k = D.sig1 ? String(D.sig1.default_k) : null;
    let mode = "fixed";
    const ui = controls([
      (bar) => D.sig1 && select(bar, "fourier-k", "Fourier probe c<sub>k</sub>, k =", D.sig1.ks.map((v) => [v, String(v)]), k, (v) => {
        k = v;
        Plotly.update("sig1-heatmap", { z: [D.sig1.S[k]] }, { "title.text": sig1Title() });
        Plotly.restyle("alignment-curves", fourierTrace(), [D.curves.length]);
      }),
      (bar) => D.pca && pcaSelect(bar, mode, (v) => { mode = v; }),
    ]);
    const top = row();
    panel(top, "emb-heatmap"); panel(top, "sig0-heatmap"); if (D.sig1) panel(top, "sig1-heatmap");
    const middle = row();
    curvesPanel(middle, "alignment-curves"); if (D.pca) panel(middle, "pca");
    curvesPanel(row(), "loss-curves");

    const sig1Title = () => `S<sup>sig,(1)</sup> through the Fourier probe c<sub>${k}</sub><br>` +
      `(cosine of φ<sup>(y;1)</sup> c<sub>${k}</sub>, fixed)`;
    const order0 = D.curves.length ? D.curves[0] : null;
    const embTitle = (i) => `S<sup>emb</sup> at ${D.unit} ${D.times[i]}` +
      (order0 ? `<br>${order0.name.split(":")[0]}: ${fmt(valueAt(order0, D.times[i]))}` : "");
    const pcaTitle = (i) => `PCA of the unit embedding rows at ${D.unit} ${D.times[i]}<br>` +
      (mode === "fixed" ? "one basis for all snapshots" : "each snapshot's own, Procrustes-aligned");
    function fourierTrace() {
      const series = D.fourier[k] ? positiveTimes(D.fourier[k]) : { x: [], y: [] };
      return { x: [series.x], y: [series.y], name: [`order 1 through c<sub>${k}</sub> (Pearson)`] };
    }
    const curveTraces = D.curves.map((series, j) => Object.assign(positiveTimes(series), {
      name: series.name, mode: "lines+markers", marker: { size: 4 }, line: { color: PALETTE[j] },
    }));
    if (D.sig1) {
      const fourier = fourierTrace();
      curveTraces.push({ x: fourier.x[0], y: fourier.y[0], name: fourier.name[0], mode: "lines+markers",
                         marker: { size: 4 }, line: { color: PALETTE[curveTraces.length], dash: "dash" } });
    }
    const lossTraces = [
      Object.assign(positiveTimes({ x: D.loss.x, y: D.loss.loss }), { name: "training loss (nats)", line: { color: PALETTE[0] } }),
      Object.assign(positiveTimes({ x: D.loss.x, y: D.loss.acc }), { name: "training accuracy", yaxis: "y2", line: { color: PALETTE[1] } }),
    ];
    const points = (i) => (D.pca ? D.pca[mode][i] : []);
    const colours = D.tokens.map((_, j) => j);
    const plots = [
      heatmap("emb-heatmap", D.S_emb[0], D.tokens, embTitle(0)),
      heatmap("sig0-heatmap", D.S_sig0, D.tokens, "S<sup>sig,(0)</sup>: order-0 label signatures<br>(cosine, fixed)"),
      D.sig1 ? heatmap("sig1-heatmap", D.sig1.S[k], D.tokens, sig1Title()) : null,
      curvesPlot("alignment-curves", curveTraces, "Alignment of S<sup>emb</sup>(t) with each signature order",
                 "correlation (upper triangle)"),
      D.pca && Plotly.newPlot("pca", [{
        type: "scatter", mode: "markers+text", x: column(points(0), 0), y: column(points(0), 1), text: D.tokens,
        textposition: "top center", textfont: { size: 9 },
        marker: { size: 8, color: colours, colorscale: "Viridis", showscale: true,
                  colorbar: { title: { text: "token order" }, thickness: 10 } },
        hovertemplate: "token %{text}<br>PC1 %{x:.3f}, PC2 %{y:.3f}<extra></extra>",
      }], {
        title: title(pcaTitle(0)), width: 460, height: 420, margin: { l: 55, r: 10, t: 64, b: 50 },
        xaxis: { title: { text: "PC 1" }, range: pcaRanges(D.pca[mode]), zeroline: false },
        yaxis: { title: { text: "PC 2" }, range: pcaRanges(D.pca[mode]), zeroline: false },
      }, PLOT),
      curvesPlot("loss-curves", lossTraces, "Training loss and accuracy (full batch)", "loss (nats, log scale)", {
        yaxis: Object.assign({ title: { text: "loss (nats, log scale)" }, type: "log" },
                             logTicks(valueRange([{ y: D.loss.loss }]))),
        yaxis2: { title: { text: "accuracy" }, overlaying: "y", side: "right", range: [0, 1.02], tickmode: "linear",
                  tick0: 0, dtick: 0.2, showgrid: false },
        margin: { l: 70, r: 70, t: 50, b: 50 },
      }),
    ].filter(Boolean);

    explorer.show = timed((i) => {
      const t = D.times[i];
      ui.slider.value = i;
      ui.label.textContent = `${D.unit} ${t}${t === 0 ? " (initialization)" : ""} · snapshot ${i + 1} of ${D.times.length}`;
      return [
        Plotly.update("emb-heatmap", { z: [D.S_emb[i]] }, { "title.text": embTitle(i) }),
        D.pca && Plotly.update("pca", { x: [column(points(i), 0)], y: [column(points(i), 1)] },
                               { "title.text": pcaTitle(i) }),
        placeCursors(t),
      ];
    });
    return markReady(plots).then(() => explorer.show(0));
  }

  // ------------------------------------------------------------------ a language-model run

  // An LM run, an analyze-model series or a Trainer output: the curves of every measure over the
  // states and, where the output has embeddings, the geometry of one state (D.frame: which of the
  // states with embeddings each slider position shows).
  function lmPage() {
    header();
    let mode = "fixed";
    const geometry = Array.isArray(D.S_emb);
    const ui = controls(geometry ? [(bar) => pcaSelect(bar, mode, (v) => { mode = v; })] : []);
    if (D.geometry_note) element("p", { id: "geometry-note", class: "note" }, app, D.geometry_note);
    if (geometry) { const top = row(); panel(top, "pca"); panel(top, "emb-heatmap"); }
    let pair = null;
    D.panels.forEach((spec, p) => { if (p % 2 === 0) pair = row(); curvesPanel(pair, spec.id); });

    // Where the state shown is not the slider's own (a Trainer output between checkpoints), say which it is.
    const shownAt = (i) => {
      const f = D.frame[i], own = D.frame_labels[f], t = D.times[i];
      if (own === t) return D.labels[i].split(" · ")[0];  // the tokens seen stay in the slider's label
      return `step ${own} (the ${own < t ? "latest checkpoint before" : "first checkpoint, saved after"} step ${t})`;
    };
    const pcaTitle = (i) => `PCA of the unit embedding rows at ${shownAt(i)}<br>` +
      (mode === "fixed" ? "one basis for all states" : "each state's own, Procrustes-aligned");
    const groupTraces = (i) => D.groups.map((group) => {
      const frame = D.pca[mode][D.frame[i]].slice(group.start, group.end);
      return { x: column(frame, 0), y: column(frame, 1) };
    });
    const rho = D.panels.length && D.panels[0].id === "rho-next" ? D.panels[0].traces[0] : null;
    const embTitle = (i) => `S<sup>emb</sup> at ${shownAt(i)}` +
      (rho ? `<br>ρ<sub>next</sub> = ${fmt(valueAt(rho, D.times[i]))}` : "");
    // One x range for every panel (the states' and the curves' together), so that the cursors line up.
    const xs = D.times.concat(...D.panels.map((spec) => spec.traces.map((series) => series.x).flat()))
      .filter((x) => x > 0 || !xlog);
    const [low, high] = [Math.min(...xs), Math.max(...xs)];
    const span = xlog ? [Math.log10(low), Math.log10(high)] : [low, high];
    const pad = Math.max(0.04 * (span[1] - span[0]), xlog ? 0.05 : 0.3);
    const plots = D.panels.map((spec) => curvesPlot(spec.id, spec.traces.map((series, j) => Object.assign(positiveTimes(series), {
      name: series.name, mode: series.markers || series.x.length < 12 ? "lines+markers" : "lines", marker: { size: 5 },
      line: { color: PALETTE[series.colour === undefined ? j : series.colour], dash: series.dash || "solid" },
    })), spec.title, spec.ylabel, Object.assign({ width: 600, xrange: [span[0] - pad, span[1] + pad] },
      spec.log ? { yaxis: Object.assign({ title: { text: spec.ylabel }, type: "log" }, logTicks(valueRange(spec.traces))) }
        : {})));
    if (geometry) {
      const initial = groupTraces(0);
      plots.push(Plotly.newPlot("pca", D.groups.map((group, g) => ({
        type: "scatter", mode: "markers+text", name: group.name, x: initial[g].x, y: initial[g].y,
        text: D.words.slice(group.start, group.end), textposition: "top center", textfont: { size: 9 },
        marker: { size: 8, color: PALETTE[g % PALETTE.length] },
        hovertemplate: `${group.name}: %{text}<br>PC1 %{x:.3f}, PC2 %{y:.3f}<extra></extra>`,
      })), {
        title: title(pcaTitle(0)), width: 560, height: 460, margin: { l: 55, r: 10, t: 64, b: 50 },
        xaxis: { title: { text: "PC 1" }, range: pcaRanges(D.pca[mode]), zeroline: false },
        yaxis: { title: { text: "PC 2" }, range: pcaRanges(D.pca[mode]), zeroline: false },
      }, PLOT));
      plots.push(heatmap("emb-heatmap", D.S_emb[D.frame[0]], D.words, embTitle(0), 470));
    }

    explorer.show = timed((i) => {
      const t = D.times[i];
      ui.slider.value = i;
      ui.label.textContent = `${D.labels[i]} · ${i + 1} of ${D.times.length}`;
      const traces = geometry ? groupTraces(i) : null;
      return [
        geometry && Plotly.update("pca", { x: traces.map((tr) => tr.x), y: traces.map((tr) => tr.y) },
                                  { "title.text": pcaTitle(i) }),
        geometry && Plotly.update("emb-heatmap", { z: [D.S_emb[D.frame[i]]] }, { "title.text": embTitle(i) }),
        placeCursors(t),
      ];
    });
    return markReady(plots).then(() => explorer.show(0));
  }

  // ------------------------------------------------------------------ a sweep

  function sweepPage() {
    header();
    const plots = [];
    let pair = null;
    D.panels.forEach((spec, p) => {
      const id = `phase-${p}`;
      if (p % 2 === 0) pair = row();
      panel(pair, id);
      const two = D.keys.length >= 2;
      const xs = D.values[D.keys[0]].map(String);
      const trace = two ? {
        type: "heatmap", x: xs, y: D.values[D.keys[1]].map(String), z: spec.z, text: spec.text, texttemplate: "%{text}",
        colorscale: "Viridis", colorbar: { title: { text: spec.log ? "log<sub>10</sub>" : "" }, thickness: 12 },
        customdata: spec.cells, hovertemplate: `${D.keys[0]} = %{x}, ${D.keys[1]} = %{y}<br>${spec.label}: %{text}` +
          "<br>click: open the cell's explorer<extra></extra>",
      } : {
        type: "scatter", mode: "lines+markers+text", x: xs, y: spec.z[0], text: spec.text[0], textposition: "top center",
        customdata: spec.cells[0], marker: { size: 10, color: PALETTE[0] },
        hovertemplate: `${D.keys[0]} = %{x}<br>${spec.label}: %{text}<br>click: open the cell's explorer<extra></extra>`,
      };
      plots.push(Plotly.newPlot(id, [trace], {
        title: title(`${spec.title}: ${spec.label}` + (spec.log ? " (colour on a log scale)" : "")),
        width: 600, height: 420, margin: { l: 80, r: 20, t: 60, b: 60 },
        xaxis: { type: "category", title: { text: D.keys[0] } },
        yaxis: two ? { type: "category", title: { text: D.keys[1] } } : { title: { text: spec.label } },
      }, PLOT).then((div) => {
        div.on("plotly_click", (event) => {
          const name = event.points[0].customdata;
          if (name && D.links[name]) window.location.href = D.links[name];
        });
      }));
    });
    const table = element("table", { class: "cells" }, app);
    const head = element("tr", {}, table);
    ["cell", "explorer", "report"].forEach((text) => element("th", {}, head, text));
    for (const cell of D.cells) {
      const line = element("tr", {}, table);
      element("td", {}, line, cell.name);
      const explore = element("td", {}, line);
      cell.explorers.forEach(([label, href]) => { element("a", { href: href }, explore, label); explore.appendChild(document.createTextNode(" ")); });
      const report = element("td", {}, line);
      if (cell.report) element("a", { href: cell.report }, report, "report.html");
    }
    if (D.note) element("p", { class: "note" }, app, D.note);
    explorer.show = async () => {};
    return markReady(plots);
  }

  ({ run: runPage, lm: lmPage, sweep: sweepPage })[D.kind]();
})();
