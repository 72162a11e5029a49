// Queues: the list (declare one), and one queue: its figures and charts, consumers,
// bindings, and publish, get, purge and delete.

import { api, features, fmtNumber, fmtRate, get, h, seg } from "./api.js";
import { argumentsField, bindingForm, parseObject, publishForm, unbind, vhostSelect } from "./forms.js";
import { exchangeHref } from "./exchanges.js";
import { listPage } from "./live.js";
import { policyLink } from "./policies.js";
import { queuedChart, ratesChart, spanQuery } from "./overview.js";
import { dangerButton, facts, field, fill, form, input, link, section, select, table } from "./widgets.js";

const QUEUE_RATES = ["publish", "deliver_get", "ack", "redeliver"];
const ACKMODES = [
  ["ack_requeue_true", "Nack message requeue true"],
  ["ack_requeue_false", "Automatic ack"],
  ["reject_requeue_true", "Reject requeue true"],
  ["reject_requeue_false", "Reject requeue false"],
];

export function queueHref(vhost, name) {
  return `#/queue/${seg(vhost)}/${seg(name)}`;
}

function rate(queue, key) {
  return fmtRate(queue.message_stats?.[`${key}_details`]);
}

export function queuesPage(root) {
  const declare = form(
    "queue-form",
    "Add a queue",
    [
      field("Virtual host", vhostSelect()),
      field("Name", input("name", { required: true })),
      field("Type", select("type", ["classic", "quorum", "stream"], "classic")),
      field("Durable", select("durable", [["true", "yes"], ["false", "no"]], "true")),
      field("Auto delete", select("auto_delete", [["false", "no"], ["true", "yes"]], "false")),
      argumentsField(),
    ],
    "Add queue",
    async (values) => {
      const queueArguments = parseObject(values.arguments, "Arguments");
      if (values.type !== "classic") queueArguments["x-queue-type"] = values.type;
      await api("PUT", `/api/queues/${seg(values.vhost)}/${seg(values.name)}`, {
        durable: values.durable === "true",
        auto_delete: values.auto_delete === "true",
        arguments: queueArguments,
      });
      return `Queue ${values.name} declared.`;
    },
  );
  return listPage(
    root,
    "Queues",
    "/api/queues?sort=name",
    [
      { title: "Virtual host", cell: (q) => q.vhost },
      { title: "Name", cell: (q) => link(queueHref(q.vhost, q.name), q.name) },
      { title: "Type", cell: (q) => q.type },
      { title: "Features", cell: (q) => features(q) },
      { title: "Policy", cell: (q) => policyLink(q.policy) },
      { title: "State", cell: (q) => h("span", { class: `state ${q.state}` }, q.state) },
      { title: "Ready", cell: (q) => fmtNumber(q.messages_ready), num: true },
      { title: "Unacked", cell: (q) => fmtNumber(q.messages_unacknowledged), num: true },
      { title: "Total", cell: (q) => fmtNumber(q.messages), num: true },
      { title: "Consumers", cell: (q) => fmtNumber(q.consumers), num: true },
      { title: "Incoming", cell: (q) => rate(q, "publish"), num: true },
      { title: "Deliver / get", cell: (q) => rate(q, "deliver_get"), num: true },
      { title: "Ack", cell: (q) => rate(q, "ack"), num: true },
    ],
    "No queues yet.",
    [section("Add a queue", declare)],
  );
}

function queueFacts(queue) {
  return facts([
    ["Virtual host", queue.vhost],
    ["Type", queue.type],
    ["Features", features(queue)],
    ["State", queue.state],
    ["Consumers", fmtNumber(queue.consumers)],
    ["Ready", h("span", { id: "queue-ready" }, fmtNumber(queue.messages_ready))],
    ["Unacked", fmtNumber(queue.messages_unacknowledged)],
    ["Total", h("span", { id: "queue-total" }, fmtNumber(queue.messages))],
    queue.messages_paged_out !== undefined ? ["Paged out", fmtNumber(queue.messages_paged_out)] : null,
    queue.kanin_first_offset !== undefined ? ["Offsets", `${queue.kanin_first_offset} to ${queue.kanin_committed_offset}`] : null,
    ["Arguments", h("code", {}, JSON.stringify(queue.arguments))],
    ["Policy", h("span", { id: "queue-policy" }, policyLink(queue.policy) || "none")],
    queue.policy ? ["Effective policy definition", h("code", { id: "queue-effective-policy" }, JSON.stringify(queue.effective_policy_definition))] : null,
  ]);
}

function getForm(vhost, name, results) {
  return form(
    "get-form",
    "Get messages",
    [
      field("Ack mode", select("ackmode", ACKMODES, "ack_requeue_true")),
      field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
      field("Messages", input("count", { type: "number", min: "1", value: "1" })),
    ],
    "Get messages",
    async (values) => {
      const messages = await api("POST", `/api/queues/${seg(vhost)}/${seg(name)}/get`, {
        count: Number(values.count),
        ackmode: values.ackmode,
        encoding: values.encoding,
        truncate: 50000,
      });
      fill(results, messages.length ? messages.map(messageView) : h("p", { class: "empty" }, "The queue is empty."));
      return messages.length ? `${messages.length} message(s) taken.` : "";
    },
  );
}

function messageView(message, index) {
  return h(
    "div",
    { class: "message" },
    h("h4", {}, `Message ${index + 1}`),
    facts([
      ["Exchange", message.exchange || "(AMQP default)"],
      ["Routing key", message.routing_key],
      ["Redelivered", message.redelivered ? "yes" : "no"],
      ["Left in queue", String(message.message_count)],
      ["Properties", h("code", {}, JSON.stringify(message.properties))],
      ["Payload", h("pre", { class: "payload" }, message.payload)],
      ["Encoding", `${message.payload_encoding}, ${message.payload_bytes} bytes`],
    ]),
  );
}

export function queuePage(root, vhost = "/", name = "") {
  const path = `/api/queues/${seg(vhost)}/${seg(name)}`;
  const details = h("div", { id: "queue-details" });
  const charts = h("div", { class: "charts" });
  const consumers = h("div", { id: "consumers" });
  const bindings = h("div", { id: "bindings" });
  const results = h("div", { id: "get-results" });
  root.append(
    h("p", { class: "crumbs" }, link("#/queues", "Queues"), " › ", vhost),
    h("h1", {}, "Queue ", h("span", { class: "mono" }, name)),
    h("div", { class: "columns" }, section("Details", details), section("Over the last minute", charts)),
    section("Consumers", consumers),
    section("Bindings", bindings, bindingForm(vhost, { queue: name })),
    h("div", { class: "columns" }, section("Publish", publishForm(vhost, "", name)), section("Get", getForm(vhost, name, results), results)),
    section(
      "Purge and delete",
      h(
        "div",
        { class: "actions" },
        dangerButton("Purge messages", async () => {
          await api("DELETE", `${path}/contents`);
          return `Queue ${name} purged.`;
        }, { id: "purge-queue" }),
        dangerButton("Delete queue", async () => {
          await api("DELETE", path);
          location.hash = "#/queues";
          return `Queue ${name} deleted.`;
        }, { id: "delete-queue" }),
      ),
    ),
  );
  return {
    title: `Queue ${name}`,
    async refresh() {
      const [queue, queueBindings, vhostConsumers] = await Promise.all([
        get(`${path}?${spanQuery(60)}`),
        get(`${path}/bindings`),
        get(`/api/consumers/${seg(vhost)}`),
      ]);
      fill(details, queueFacts(queue));
      fill(charts, queuedChart(queue), ratesChart(queue.message_stats || {}, QUEUE_RATES));
      fill(consumers, consumerTable(vhostConsumers.filter((c) => c.queue.name === name)));
      fill(bindings, bindingTable(vhost, queueBindings));
    },
  };
}

function consumerTable(consumers) {
  return table(
    [
      { title: "Tag", cell: (c) => h("span", { class: "mono" }, c.consumer_tag) },
      { title: "Channel", cell: (c) => c.channel_details.name },
      { title: "Ack required", cell: (c) => (c.ack_required ? "yes" : "no") },
      { title: "Exclusive", cell: (c) => (c.exclusive ? "yes" : "no") },
      { title: "Prefetch", cell: (c) => fmtNumber(c.prefetch_count), num: true },
      { title: "Activity", cell: (c) => c.activity_status },
    ],
    consumers,
    "No consumers.",
  );
}

function bindingTable(vhost, bindings) {
  return table(
    [
      { title: "From", cell: (b) => link(exchangeHref(vhost, b.source), b.source || "(AMQP default)") },
      { title: "Routing key", cell: (b) => h("span", { class: "mono" }, b.routing_key) },
      { title: "Arguments", cell: (b) => (Object.keys(b.arguments).length ? JSON.stringify(b.arguments) : "") },
      { title: "", cell: (b) => (b.source ? dangerButton("Unbind", () => unbind(vhost, b)) : "") },
    ],
    bindings,
  );
}
