// Line charts drawn as inline SVG: time along the bottom, 0 to a round maximum up the
// side, one line per series, and a legend with each series' latest value.

import { h } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 190;
const MARGIN = { left: 56, right: 12, top: 12, bottom: 24 };
const DASH = 6; // the length of a dash of a series drawn over an equal one
export const COLOURS = ["#2f6fde", "#e8710a", "#1e8e3e", "#a142f4", "#d93025", "#12a4af", "#777"];

function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

// The axis' top, 1, 2 or 5 times a power of ten at or above `value`, and how many steps
// divide it into round numbers (5 of 1, 4 of 0.5, 5 of 0.2: 1k, 2k and 5k tops alike).
function axis(value) {
  if (value <= 0) return { top: 1, steps: 5 };
  const power = 10 ** Math.floor(Math.log10(value));
  for (const [factor, steps] of [[1, 5], [2, 4], [5, 5], [10, 5]]) {
    if (factor * power >= value) return { top: factor * power, steps };
  }
  return { top: 10 * power, steps: 5 };
}

function shortNumber(value) {
  if (value >= 1e6) return `${+(value / 1e6).toFixed(2)}M`;
  if (value >= 1e3) return `${+(value / 1e3).toFixed(2)}k`;
  return `${+value.toFixed(value < 10 && value % 1 ? 2 : 0)}`;
}

function clock(ms) {
  return new Date(ms).toTimeString().slice(0, 8);
}

// Rates per second from a counter's samples (newest first, as the API sends them).
export function ratesFromSamples(samples) {
  const points = [];
  for (let i = 0; i + 1 < samples.length; i += 1) {
    const seconds = (samples[i].timestamp - samples[i + 1].timestamp) / 1000;
    points.push([samples[i].timestamp, Math.max(0, (samples[i].sample - samples[i + 1].sample) / seconds)]);
  }
  return points.reverse();
}

// A gauge's samples (queue lengths) as points, oldest first.
export function pointsFromSamples(samples) {
  return samples.map((s) => [s.timestamp, s.sample]).reverse();
}

function colour(index) {
  return COLOURS[index % COLOURS.length];
}

// A dashed series' swatch is half its colour, half that of the line it alternates with.
function swatchStyle(own, under) {
  if (!under) return `background:${own}`;
  return `background:linear-gradient(90deg, ${own} 50%, ${under} 50%)`;
}

// Two series are drawn on one line when every value is the same at the same time
// (publishes all confirmed, deliveries all acked).
function coincide(a, b) {
  if (!a.length || a.length !== b.length) return false;
  return a.every(([t, v], i) => t === b[i][0] && Math.abs(v - b[i][1]) <= 1e-9 * Math.max(1, Math.abs(v)));
}

// How each series is drawn: the first of a set of equal series solid, each later one
// dashed, its dashes in a place of its own along the line, so every colour shows
// (a later line would otherwise hide an earlier one exactly). `under`: the earlier
// one it hides, for the legend.
function strokes(series) {
  const styles = series.map(() => ({}));
  const grouped = new Set();
  series.forEach((first, index) => {
    if (grouped.has(index)) return;
    const same = [];
    for (let other = index + 1; other < series.length; other += 1) {
      if (!grouped.has(other) && coincide(first.points, series[other].points)) same.push(other);
    }
    same.forEach((other, place) => {
      grouped.add(other);
      const gap = DASH * same.length;
      styles[other] = { dasharray: `${DASH} ${gap}`, dashoffset: -DASH * place, under: first.label, underColour: colour(index) };
    });
  });
  return styles;
}

// series: [{label, points: [[timestamp ms, value], ...]}]; unit: text after the
// legend's values. Lines are drawn in order, so a later one shows over an earlier one.
export function lineChart(title, series, unit = "") {
  const all = series.flatMap((s) => s.points);
  const chartWidth = WIDTH - MARGIN.left - MARGIN.right;
  const chartHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const times = all.map(([t]) => t);
  const start = Math.min(...times);
  const end = Math.max(...times);
  const { top, steps } = axis(Math.max(0, ...all.map(([, v]) => v)));
  const x = (t) => MARGIN.left + (end > start ? ((t - start) / (end - start)) * chartWidth : chartWidth);
  const y = (v) => MARGIN.top + chartHeight - (v / top) * chartHeight;
  const drawing = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart-svg", role: "img" });
  drawing.append(svg("title", {}, title));
  for (let tick = 0; tick <= steps; tick += 1) {
    const value = (top * tick) / steps;
    drawing.append(
      svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value), y2: y(value), class: "grid" }),
      svg("text", { x: MARGIN.left - 6, y: y(value) + 4, class: "axis", "text-anchor": "end" }, shortNumber(value)),
    );
  }
  if (all.length) {
    for (let tick = 0; tick <= 3; tick += 1) {
      const t = start + ((end - start) * tick) / 3;
      const anchor = tick === 0 ? "start" : tick === 3 ? "end" : "middle";
      drawing.append(svg("text", { x: x(t), y: HEIGHT - 6, class: "axis", "text-anchor": anchor }, clock(t)));
    }
  } else {
    drawing.append(svg("text", { x: WIDTH / 2, y: HEIGHT / 2, class: "axis", "text-anchor": "middle" }, "nothing measured yet"));
  }
  const styles = strokes(series);
  series.forEach((s, index) => {
    if (!s.points.length) return;
    const path = s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    const attributes = { points: path, class: "line", stroke: colour(index) };
    if (styles[index].dasharray) {
      attributes["stroke-dasharray"] = styles[index].dasharray;
      attributes["stroke-dashoffset"] = styles[index].dashoffset;
    }
    drawing.append(svg("polyline", attributes));
  });
  const legend = h(
    "ul",
    { class: "legend" },
    series.map((s, index) => {
      const latest = s.points.length ? s.points[s.points.length - 1][1] : 0;
      const under = styles[index].under;
      return h(
        "li",
        { title: under ? `drawn dashed: the same as ${under}` : null },
        h("span", { class: "swatch", style: swatchStyle(colour(index), styles[index].underColour) }),
        h("span", { class: "legend-label" }, s.label),
        h("span", { class: "legend-value" }, `${shortNumber(latest)}${unit}`),
      );
    }),
  );
  return h("figure", { class: "chart" }, h("figcaption", {}, title), drawing, legend);
}
