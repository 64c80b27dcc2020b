// Charts of the embedded optimizer's console, drawn as inline SVG: no build step, no library.
//
// OptimizerCharts.render(container, driverState) fills `container` with:
//   - the objective by step, each step a marker, and the best-so-far line (feasible steps only);
//   - each constrained metric by step against its limit (a dashed line, labelled);
//   - the settings of the recommendation against the baseline's, each on its range.
// Readable without colour: a feasible step is a filled circle, an infeasible one a cross, a
// confirmation step a square, a cancelled step (Abort: no values) an open triangle on the step
// axis; lines differ by dash pattern; every chart has a title and a text legend, and each marker
// a tooltip (<title>) with its numbers.
// Drawn at the container's width (one chart unit is one CSS pixel, so text keeps its size); the
// y axis has round ticks (1, 2 or 5 times a power of ten); a reading beyond a constraint chart's
// scale sits on its top edge under an arrow labelled with its value; limit labels stand in the
// right margin, clear of the data.
"use strict";

(function () {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const DEFAULT_WIDTH = 640, MIN_WIDTH = 480, HEIGHT = 252;
  const PAD = { left: 64, right: 100, top: 64, bottom: 34 };
  const MARKER = 4.5;
  const TICKS = 5;              // about this many y ticks
  const OFF_SCALE_ROWS = [45, 56];  // baselines of the off-scale labels (two rows, so neighbours do not collide)
  const CHAR_WIDTH = 6.2;       // an 11px character, for laying out text without measuring it
  let WIDTH = DEFAULT_WIDTH;    // set by render() to the container's width

  function node(tag, attributes, text) {
    const element = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = String(text);
    return element;
  }

  // A number as a person reads it: 4 significant digits, no exponent for ordinary magnitudes
  // (the same text as servo_actors/readable.py's number_text, which the demo prints).
  function fmt(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "-";
    if (typeof value !== "number") return String(value);
    const abs = Math.abs(value);
    if (abs !== 0 && (abs < 1e-4 || abs >= 1e15)) return value.toExponential(3).replace(/e([+-])(\d)$/, "e$10$2");
    if (Number.isInteger(value)) return String(value);
    const decimals = Math.max(0, 3 - Math.floor(Math.log10(abs)));
    return String(+value.toFixed(decimals));
  }

  // Round ticks over [low, high]: multiples of 1, 2 or 5 times a power of ten, about `count` of them.
  function niceTicks(low, high, count) {
    const raw = (high - low) / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const ticks = [];
    for (let k = Math.ceil(low / step - 1e-9); k * step <= high + step * 1e-9; k++) {
      ticks.push({ value: k * step, text: (k * step).toFixed(decimals).replace(/^-(0\.?0*)$/, "$1") });
    }
    return { ticks, step };
  }

  // A chart frame: an <svg> with a title, axes and a linear scale for x (steps) and y.
  function frame(title, xs, ys, yLabel) {
    const svg = node("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title, class: "chart" });
    svg.append(node("title", {}, title));
    svg.append(node("text", { x: PAD.left, y: 16, class: "chart-title" }, title));
    let low = Math.min(...ys), high = Math.max(...ys);
    if (!Number.isFinite(low) || !Number.isFinite(high)) { low = 0; high = 1; }
    if (high === low) { high += Math.abs(high) * 0.1 || 1; low -= Math.abs(low) * 0.1 || 1; }
    const span = high - low;
    low -= span * 0.08; high += span * 0.08;
    const first = Math.min(...xs, 0), last = Math.max(...xs, 1);
    const x = (v) => PAD.left + (v - first) / (last - first || 1) * (WIDTH - PAD.left - PAD.right);
    const y = (v) => HEIGHT - PAD.bottom - (v - low) / (high - low) * (HEIGHT - PAD.top - PAD.bottom);
    const axes = node("g", { class: "axes" });
    axes.append(node("line", { x1: PAD.left, y1: HEIGHT - PAD.bottom, x2: WIDTH - PAD.right, y2: HEIGHT - PAD.bottom }));
    axes.append(node("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: HEIGHT - PAD.bottom }));
    for (const tick of niceTicks(low, high, TICKS).ticks) {
      axes.append(node("line", { x1: PAD.left - 4, x2: PAD.left, y1: y(tick.value), y2: y(tick.value), class: "tick" }));
      axes.append(node("text", { x: PAD.left - 6, y: y(tick.value) + 4, "text-anchor": "end", class: "y-tick",
                                 "data-value": tick.value }, tick.text));
    }
    const stepTicks = last - first <= 12 ? xs : [first, Math.round((first + last) / 2), last];
    for (const tick of new Set(stepTicks)) {
      axes.append(node("text", { x: x(tick), y: HEIGHT - PAD.bottom + 14, "text-anchor": "middle" }, tick));
    }
    axes.append(node("text", { x: (WIDTH + PAD.left) / 2, y: HEIGHT - 4, "text-anchor": "middle" }, "step"));
    axes.append(node("text", { x: 12, y: (HEIGHT) / 2, transform: `rotate(-90 12 ${HEIGHT / 2})`, "text-anchor": "middle" }, yLabel));
    svg.append(axes);
    return { svg, x, y };
  }

  // One marker per step: filled circle (feasible), cross (infeasible), square (confirmation),
  // open triangle (cancelled: it has no value, so it sits on the step axis).
  function marker(step, cx, cy, text) {
    const kind = step.status === "cancelled" ? "cancelled"
      : step.confirms !== null && step.confirms !== undefined ? "confirmation"
      : step.feasible ? "feasible" : "infeasible";
    const group = node("g", { class: `marker ${kind}`, "data-step": step.n, "data-kind": kind });
    if (kind === "feasible") {
      group.append(node("circle", { cx, cy, r: MARKER }));
    } else if (kind === "cancelled") {
      const d = MARKER + 0.5;
      group.append(node("path", { d: `M${cx - d},${cy - d}L${cx + d},${cy - d}L${cx},${cy + d}Z` }));
    } else if (kind === "confirmation") {
      group.append(node("rect", { x: cx - MARKER, y: cy - MARKER, width: 2 * MARKER, height: 2 * MARKER }));
    } else {
      const d = MARKER;
      group.append(node("path", { d: `M${cx - d},${cy - d}L${cx + d},${cy + d}M${cx - d},${cy + d}L${cx + d},${cy - d}` }));
    }
    group.append(node("title", {}, text));
    return group;
  }

  // The legend in words (with the shapes as characters), on the line under the title.
  function legend(svg, items) {
    const group = node("g", { class: "legend" });
    let at = PAD.left;
    for (const label of items) {
      group.append(node("text", { x: at, y: 32 }, label));
      at += label.length * CHAR_WIDTH + 18;
    }
    svg.append(group);
  }

  function measured(steps, metric) {
    return steps.filter((s) => s.status === "ok" && typeof (s.metrics || {})[metric] === "number");
  }

  function cancelledSteps(steps) {
    return steps.filter((s) => s.status === "cancelled");
  }

  // Cancelled steps on the step axis, each an open triangle saying so in its tooltip.
  function cancelledMarkers(cancelled, x) {
    const group = node("g", { class: "markers cancelled-markers" });
    for (const step of cancelled) {
      group.append(marker(step, x(step.n), HEIGHT - PAD.bottom - MARKER - 2,
        `step ${step.n}: cancelled (Abort), no values: nothing known about its settings`));
    }
    return group;
  }

  function objectiveChart(driver) {
    const objective = (driver.plan || {}).objective || {};
    const sense = objective.minimize !== undefined ? "minimize" : "maximize";
    const metric = objective[sense];
    const steps = measured(driver.steps || [], metric);
    if (!metric || !steps.length) return null;
    const cancelled = cancelledSteps(driver.steps || []);
    const values = steps.map((s) => s.metrics[metric]);
    const xs = [...steps, ...cancelled].map((s) => s.n);
    const { svg, x, y } = frame(`${metric} by step (${sense}), best so far`, xs, values, metric);
    svg.dataset.chart = "objective";
    // Best so far among feasible search steps: a step function, dashed.
    let best = null;
    const points = [];
    for (const step of steps) {
      if (step.feasible && !step.rejected) {
        const value = step.metrics[metric];
        if (best === null || (sense === "minimize" ? value < best : value > best)) best = value;
      }
      if (best !== null) points.push(`${x(step.n)},${y(best)}`);
    }
    if (points.length) {
      svg.append(node("polyline", { points: points.join(" "), class: "best-line", fill: "none", "stroke-dasharray": "6 3" }));
    }
    const markers = node("g", { class: "markers" });
    for (const step of steps) {
      markers.append(marker(step, x(step.n), y(step.metrics[metric]), `step ${step.n}: ${metric} ${fmt(step.metrics[metric])}` +
        (step.feasible ? " (meets every constraint)" : " (breaks a constraint)")));
    }
    svg.append(markers);
    if (cancelled.length) svg.append(cancelledMarkers(cancelled, x));
    legend(svg, ["● feasible", "✕ infeasible", "■ confirmation", "▽ cancelled", "- - best so far"]);
    return svg;
  }

  function constraintChart(driver, text) {
    const match = /^\s*(\S+)\s*(<=|>=|==|<|>)\s*(\S+)\s*$/.exec(text);
    if (!match) return null;
    const [, metric, op, boundText] = match;
    const bound = Number(boundText);
    const steps = measured(driver.steps || [], metric);
    if (!steps.length) return null;
    const cancelled = cancelledSteps(driver.steps || []);
    const values = steps.map((s) => s.metrics[metric]);
    // Far-off readings (a saturated service) would flatten the rest: the axis stops at 3x the limit.
    const cap = bound > 0 ? bound * 3 : Math.max(...values);
    const offScale = values.map((v) => bound > 0 && v > cap);
    const shown = values.filter((v, i) => !offScale[i]);
    const xs = [...steps, ...cancelled].map((s) => s.n);
    const { svg, x, y } = frame(`${metric} against its limit (${op} ${fmt(bound)})`, xs,
                                [...shown, bound, ...(offScale.some(Boolean) ? [cap] : [])], metric);
    svg.dataset.chart = "constraint";
    svg.dataset.metric = metric;
    svg.append(node("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(bound), y2: y(bound), class: "limit", "stroke-dasharray": "2 3" }));
    // In the right margin, beside its line: never over a data point.
    svg.append(node("text", { x: WIDTH - PAD.right + 6, y: y(bound) + 4, "text-anchor": "start", class: "limit-label" }, `limit ${op} ${fmt(bound)}`));
    const markers = node("g", { class: "markers" });
    const arrows = node("g", { class: "off-scale-markers" });
    let lastRight = [-Infinity, -Infinity];  // right end of the last label in each row
    steps.forEach((step, i) => {
      const met = (step.constraints || []).find((c) => c.constraint.startsWith(metric + " "));
      const clipped = offScale[i] ? ` (off the scale, above ${fmt(cap)})` : "";
      const cy = offScale[i] ? PAD.top : y(values[i]);
      markers.append(marker(step, x(step.n), cy, `step ${step.n}: ${metric} ${fmt(values[i])}${clipped}` +
        (met ? (met.met ? " meets " : " breaks ") + met.constraint : "")));
      if (offScale[i]) {
        // Clipped at the top edge: an arrow pointing up out of the chart, and the value itself.
        const cx = x(step.n);
        const text = `▲ ${fmt(values[i])}`;
        const half = text.length * CHAR_WIDTH / 2;
        const row = cx - half > lastRight[0] + 2 ? 0 : 1;
        lastRight[row] = cx + half;
        const group = node("g", { class: "off-scale", "data-step": step.n, "data-value": values[i] });
        group.append(node("text", { x: cx, y: OFF_SCALE_ROWS[row], "text-anchor": "middle" }, text));
        group.append(node("title", {}, `step ${step.n}: ${metric} ${fmt(values[i])}, off the scale (above ${fmt(cap)})`));
        arrows.append(group);
      }
    });
    svg.append(markers, arrows);
    if (cancelled.length) svg.append(cancelledMarkers(cancelled, x));
    legend(svg, ["● feasible", "✕ infeasible", "▽ cancelled", "··· limit", ...(offScale.some(Boolean) ? ["▲ off the scale"] : [])]);
    return svg;
  }

  function settingsChart(driver) {
    const best = driver.best;
    const baseline = (driver.steps || []).find((s) => s.n === 0);
    const space = (driver.space || []).filter((p) => !p.pinned);
    if (!best || !baseline || !space.length) return null;
    const rowHeight = 34;
    const height = PAD.top + rowHeight * space.length + 12;
    const svg = node("svg", { viewBox: `0 0 ${WIDTH} ${height}`, role: "img", class: "chart",
                              "aria-label": `settings of the recommendation (step ${best.step}) against the baseline` });
    svg.dataset.chart = "settings";
    svg.append(node("title", {}, "settings: recommendation against baseline"));
    svg.append(node("text", { x: PAD.left, y: 16, class: "chart-title" }, `settings: recommendation (step ${best.step}) against baseline`));
    legend(svg, ["▭ baseline (outline)", "▬ recommended (solid)"]);
    const left = 150, right = WIDTH - 120, width = right - left;
    space.forEach((p, i) => {
      const [component, name] = p.setting.split(/\.(.*)/s);
      const before = ((baseline.settings || {})[component] || {})[name];
      const after = ((best.settings || {})[component] || {})[name];
      const top = PAD.top + i * rowHeight;
      const group = node("g", { class: "setting", "data-setting": p.setting });
      group.append(node("text", { x: left - 8, y: top + 17, "text-anchor": "end" }, p.setting));
      if (p.type === "enum") {
        group.append(node("text", { x: left, y: top + 17, class: "enum" }, `${fmt(before)} → ${fmt(after)}` + (before === after ? " (unchanged)" : "")));
      } else {
        const position = (v) => Math.max(0, Math.min(1, (v - p.min) / ((p.max - p.min) || 1)));
        group.append(node("rect", { x: left, y: top + 3, width: Math.max(1, position(before) * width), height: 10, class: "bar baseline" }));
        group.append(node("rect", { x: left, y: top + 15, width: Math.max(1, position(after) * width), height: 10, class: "bar recommended" }));
        group.append(node("text", { x: right + 6, y: top + 12, class: "value" }, `${fmt(before)} (baseline)`));
        group.append(node("text", { x: right + 6, y: top + 25, class: "value" }, `${fmt(after)}`));
      }
      svg.append(group);
    });
    return svg;
  }

  function render(container, driver) {
    WIDTH = Math.max(MIN_WIDTH, Math.round(container.clientWidth || DEFAULT_WIDTH));
    const charts = [objectiveChart(driver)];
    for (const text of ((driver.plan || {}).objective || {}).constraints || []) charts.push(constraintChart(driver, text));
    charts.push(settingsChart(driver));
    const drawn = charts.filter(Boolean);
    container.replaceChildren(...drawn);
    if (!drawn.length) container.textContent = "no measurements yet";
  }

  window.OptimizerCharts = { render, fmt };
})();
