// Overview: totals, queued messages and message rates over the last ten minutes, the
// node's figures and its listeners.

import { fmtBytes, fmtDuration, fmtNumber, fmtRate, get, h, hasTag } from "./api.js";
import { lineChart, pointsFromSamples, ratesFromSamples } from "./chart.js";
import { facts, fill, section, select, table } from "./widgets.js";


export const RATE_LABELS = {
  publish: "Publish",
  confirm: "Publisher confirm",
  deliver: "Deliver (manual ack)",
  deliver_no_ack: "Deliver (auto ack)",
  get: "Get (manual ack)",
  get_no_ack: "Get (auto ack)",
  get_empty: "Get (empty)",
  deliver_get: "Deliver and get",
  ack: "Consumer ack",
  redeliver: "Redelivered",
  return_unroutable: "Unroutable (returned)",
  drop_unroutable: "Unroutable (dropped)",
};
const CHARTED_RATES = ["publish", "confirm", "deliver_get", "ack", "redeliver", "return_unroutable", "drop_unroutable"];

function card(label, value, id) {
  return h("div", { class: "card", id }, h("div", { class: "card-value" }, value), h("div", { class: "card-label" }, label));
}

export function queuedChart(holder) {
  const series = [
    ["Total", "messages_details"],
    ["Ready", "messages_ready_details"],
    ["Unacked", "messages_unacknowledged_details"],
  ].map(([label, key]) => ({ label, points: pointsFromSamples(holder[key]?.samples || []) }));
  return lineChart("Queued messages", series);
}

// The charts' time span: the query that asks for it, and what the page calls it.
export const SPANS = [
  ["60", "Last minute"],
  ["600", "Last ten minutes"],
];

export function spanQuery(seconds) {
  return `lengths_age=${seconds}&lengths_incr=5&msg_rates_age=${seconds}&msg_rates_incr=5`;
}

export function ratesChart(stats, names) {
  const series = names
    .filter((name) => stats[`${name}_details`])
    .map((name) => ({ label: RATE_LABELS[name] || name, points: ratesFromSamples(stats[`${name}_details`].samples || []) }));
  return lineChart("Message rates", series, "/s");
}

function nodeFacts(overview, node) {
  const pairs = [
    ["Node", overview.node],
    ["kanin", overview.kanin_version],
    ["Speaks as RabbitMQ", overview.rabbitmq_version],
    ["Python", overview.python_version],
  ];
  if (node) {
    pairs.push(
      ["Uptime", fmtDuration(node.uptime)],
      ["Memory", node.mem_used !== undefined ? `${fmtBytes(node.mem_used)} of ${fmtBytes(node.mem_limit)} high watermark` : `high watermark ${fmtBytes(node.mem_limit)}`],
      ["Disk free", node.disk_free !== undefined ? `${fmtBytes(node.disk_free)} (limit ${fmtBytes(node.disk_free_limit)})` : `limit ${fmtBytes(node.disk_free_limit)}`],
      ["File descriptors", node.fd_used !== undefined ? `${node.fd_used} of ${node.fd_total}` : `${node.fd_total} available`],
      ["Alarms", alarms(node)],
    );
  }
  return facts(pairs);
}

function alarms(node) {
  const raised = [node.mem_alarm && "memory", node.disk_free_alarm && "disk"].filter(Boolean);
  if (!raised.length) return h("span", { class: "good" }, "none");
  return h("span", { class: "bad" }, raised.join(", "));
}

export function overviewPage(root) {
  const cards = h("div", { class: "cards", id: "totals" });
  const charts = h("div", { class: "charts", id: "charts" });
  const rates = h("div", { id: "rates" });
  const node = h("div", { id: "node" });
  const listeners = h("div", { id: "listeners" });
  const span = select("span", SPANS, sessionStorage.getItem("kanin.span") || "60", {
    id: "span",
    onchange: () => {
      sessionStorage.setItem("kanin.span", span.value);
      window.dispatchEvent(new Event("kanin:changed"));
    },
  });
  root.append(
    h("h1", {}, "Overview"),
    cards,
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Messages"), span), charts, rates),
    h("div", { class: "columns" }, section("Node", node), section("Listeners", listeners)),
  );
  return {
    title: "Overview",
    async refresh() {
      const [overview, nodes] = await Promise.all([
        get(`/api/overview?${spanQuery(span.value)}`),
        hasTag("administrator", "monitoring") ? get("/api/nodes") : null,
      ]);
      const objects = overview.object_totals;
      const queued = overview.queue_totals;
      fill(
        cards,
        card("Connections", fmtNumber(objects.connections), "total-connections"),
        card("Channels", fmtNumber(objects.channels), "total-channels"),
        card("Exchanges", fmtNumber(objects.exchanges), "total-exchanges"),
        card("Queues", fmtNumber(objects.queues), "total-queues"),
        card("Consumers", fmtNumber(objects.consumers), "total-consumers"),
        card("Messages ready", fmtNumber(queued.messages_ready), "total-ready"),
        card("Unacked", fmtNumber(queued.messages_unacknowledged), "total-unacked"),
      );
      const stats = overview.message_stats || {};
      if (!Object.keys(stats).length) {
        fill(charts, h("p", { class: "empty" }, "Message rates are the whole broker's: they are shown to users who may see every virtual host."));
        fill(rates);
      } else {
        fill(charts, queuedChart(queued), ratesChart(stats, CHARTED_RATES));
        fill(rates, rateTable(stats));
      }
      fill(node, nodeFacts(overview, nodes && nodes[0]));
      fill(
        listeners,
        table(
          [
            { title: "Protocol", cell: (l) => l.protocol },
            { title: "Address", cell: (l) => l.ip_address },
            { title: "Port", cell: (l) => String(l.port), num: true },
          ],
          overview.listeners,
        ),
      );
    },
  };
}

function rateTable(stats) {
  const names = Object.keys(RATE_LABELS).filter((name) => name in stats);
  return table(
    [
      { title: "Figure", cell: (name) => RATE_LABELS[name] },
      { title: "Now", cell: (name) => fmtRate(stats[`${name}_details`]), num: true },
      { title: "Since start", cell: (name) => fmtNumber(stats[name]), num: true },
    ],
    names,
  );
}
