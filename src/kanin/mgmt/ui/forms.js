// Forms more than one page has: publish a message, pick a virtual host, bind.

import { api, exchangeSeg, get, h, seg } from "./api.js";
import { field, form, input, select } from "./widgets.js";

// Keeps the chosen option when the list is refreshed.
export function setOptions(node, values) {
  const kept = node.value;
  node.replaceChildren(...values.map((value) => h("option", { value }, value)));
  if (values.includes(kept)) node.value = kept;
}

export function vhostSelect(name = "vhost") {
  const node = select(name, ["/"], "/");
  get("/api/vhosts")
    .then((vhosts) => setOptions(node, vhosts.map((vhost) => vhost.name)))
    .catch(() => {});
  return node;
}

// A JSON object typed into a text area ("" is none).
export function parseObject(text, what) {
  if (!text.trim()) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${what} must be a JSON object, like {"x-message-ttl": 60000}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`${what} must be a JSON object, like {"x-message-ttl": 60000}`);
  }
  return value;
}

function textarea(name, placeholder, rows = 3) {
  return h("textarea", { name, placeholder, rows });
}

export function argumentsField() {
  return field("Arguments (JSON)", textarea("arguments", '{"x-message-ttl": 60000}', 2));
}

// Publish to `exchange` in `vhost`; `routingKey`: the key filled in (a queue's name).
export function publishForm(vhost, exchange, routingKey = "") {
  return form(
    "publish-form",
    "Publish a message",
    [
      field("Routing key", input("routing_key", { value: routingKey })),
      field("Delivery mode", select("delivery_mode", [["1", "1 - non-persistent"], ["2", "2 - persistent"]], "1")),
      field("Headers (JSON)", textarea("headers", '{"trace": "abc"}', 2)),
      field("Content type", input("content_type", { placeholder: "text/plain" })),
      h("label", { class: "field wide" }, h("span", {}, "Payload"), textarea("payload", "", 4)),
    ],
    "Publish message",
    async (values) => {
      const properties = { delivery_mode: Number(values.delivery_mode) };
      const headers = parseObject(values.headers, "Headers");
      if (Object.keys(headers).length) properties.headers = headers;
      if (values.content_type) properties.content_type = values.content_type;
      const reply = await api("POST", `/api/exchanges/${seg(vhost)}/${exchangeSeg(exchange)}/publish`, {
        properties,
        routing_key: values.routing_key,
        payload: values.payload,
        payload_encoding: "string",
      });
      return reply.routed ? "Message published." : "Message published, but not routed to any queue.";
    },
  );
}

// Bind from an exchange to a queue or an exchange.
export function bindingForm(vhost, { source, queue }) {
  const fields = [];
  if (source === undefined) fields.push(field("From exchange", input("source", { required: true })));
  if (queue === undefined) {
    fields.push(field("To", select("destination_type", [["q", "queue"], ["e", "exchange"]], "q")));
    fields.push(field("Destination", input("destination", { required: true })));
  }
  fields.push(field("Routing key", input("routing_key")), argumentsField());
  return form("binding-form", "Add a binding", fields, "Bind", async (values) => {
    const from = source !== undefined ? source : values.source;
    const kind = queue !== undefined ? "q" : values.destination_type;
    const to = queue !== undefined ? queue : values.destination;
    const body = { routing_key: values.routing_key, arguments: parseObject(values.arguments, "Arguments") };
    await api("POST", `/api/bindings/${seg(vhost)}/e/${seg(from)}/${kind}/${seg(to)}`, body);
    return `Bound ${from || "(default)"} to ${to}.`;
  });
}

export async function unbind(vhost, binding) {
  const kind = binding.destination_type === "queue" ? "q" : "e";
  const path = `/api/bindings/${seg(vhost)}/e/${seg(binding.source)}/${kind}/${seg(binding.destination)}/${seg(binding.properties_key)}`;
  await api("DELETE", path);
  return "Binding removed.";
}
