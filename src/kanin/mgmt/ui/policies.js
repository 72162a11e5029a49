// Policies (https://www.rabbitmq.com/parameters.html#policies): the list, a form that
// adds one or replaces one of the same name, and delete.

import { ApiError, api, get, h, seg } from "./api.js";
import { parseObject, vhostSelect } from "./forms.js";
import { dangerButton, field, fill, form, input, section, select, table } from "./widgets.js";

const APPLY_TO = [
  ["all", "Exchanges and queues"],
  ["queues", "Queues"],
  ["exchanges", "Exchanges"],
];

// The definition keys the broker knows, and the type each value takes: a value typed
// as text is sent as that type (max-length "10" as the number 10), as RabbitMQ's UI
// does with its known keys.
const KNOWN_KEYS = {
  "message-ttl": "number",
  expires: "number",
  "max-length": "number",
  "max-length-bytes": "number",
  overflow: "string",
  "dead-letter-exchange": "string",
  "dead-letter-routing-key": "string",
  "dead-letter-strategy": "string",
  "delivery-limit": "number",
  "queue-mode": "string",
  "queue-version": "number",
  "max-age": "string",
  "stream-max-segment-size-bytes": "number",
  "queue-leader-locator": "string",
  "initial-cluster-size": "number",
  "alternate-exchange": "string",
  "consumer-timeout": "number",
  "delayed-retry-type": "string",
  "delayed-retry-min": "number",
  "delayed-retry-max": "number",
  "delayed-retry-multiplier": "number",
  "max-in-memory-length": "number",
  "max-in-memory-bytes": "number",
  "queue-master-locator": "string",
  "ha-mode": "string",
  "ha-params": "auto",
  "ha-sync-mode": "string",
  "ha-sync-batch-size": "number",
  "ha-promote-on-shutdown": "string",
  "ha-promote-on-failure": "string",
};
const TYPES = [
  ["auto", "Auto"],
  ["string", "String"],
  ["number", "Number"],
  ["boolean", "Boolean"],
  ["list", "List"],
];
const NUMBER = /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/;

// One typed value. A number that does not parse is sent as the text typed, so the
// broker's refusal names it ("<<"ten">> is not a valid maximum length").
export function typedValue(key, text, type = "auto") {
  const trimmed = text.trim();
  const wanted = type === "auto" ? KNOWN_KEYS[key] || "auto" : type;
  if (wanted === "string") return text;
  if (wanted === "list") return trimmed ? trimmed.split(",").map((item) => typedValue("", item)) : [];
  if (wanted === "boolean") return trimmed === "true" ? true : trimmed === "false" ? false : text;
  if (wanted === "number") return NUMBER.test(trimmed) ? Number(trimmed) : text;
  if (NUMBER.test(trimmed)) return Number(trimmed);
  if (trimmed === "true" || trimmed === "false") return trimmed === "true";
  return text;
}

function keyChoices() {
  return h("datalist", { id: "policy-keys" }, Object.keys(KNOWN_KEYS).map((key) => h("option", { value: key })));
}

// A key = value row; typing in the last row adds an empty one below it.
function definitionRow(rows, key = "", value = "", type = "auto") {
  const row = h(
    "div",
    { class: "definition-row" },
    h("input", { class: "definition-key", list: "policy-keys", placeholder: "key", value: key, "aria-label": "Key" }),
    h("span", { class: "equals" }, "="),
    h("input", { class: "definition-value", placeholder: "value", value, "aria-label": "Value" }),
    select("", TYPES, type, { class: "definition-type", "aria-label": "Type" }),
  );
  row.addEventListener("input", () => {
    if (row === rows.lastElementChild && row.querySelector(".definition-key").value) rows.append(definitionRow(rows));
  });
  return row;
}

function setRows(rows, definition) {
  rows.replaceChildren(...Object.entries(definition).map(([key, value]) => definitionRow(rows, key, shownValue(value))));
  rows.append(definitionRow(rows));
}

function shownValue(value) {
  if (Array.isArray(value)) return value.join(",");
  return typeof value === "string" ? value : JSON.stringify(value);
}

// The rows' definition, then the JSON text area's keys over it.
export function definitionOf(rows, jsonText) {
  const definition = {};
  for (const row of rows.querySelectorAll(".definition-row")) {
    const key = row.querySelector(".definition-key").value.trim();
    if (!key) continue;
    definition[key] = typedValue(key, row.querySelector(".definition-value").value, row.querySelector(".definition-type").value);
  }
  return { ...definition, ...parseObject(jsonText, "Definition (JSON)") };
}

function policyForm(rows, refusal) {
  const node = form(
    "policy-form",
    "Add or update a policy",
    [
      field("Virtual host", vhostSelect()),
      field("Name", input("name", { required: true })),
      field("Pattern", input("pattern", { required: true, placeholder: "^amq\\." }), "regular expression, searched in names"),
      field("Apply to", select("apply-to", APPLY_TO, "all")),
      field("Priority", input("priority", { type: "number", value: "0" })),
      h("div", { class: "field wide" }, h("span", {}, "Definition"), rows, keyChoices()),
      h(
        "label",
        { class: "field wide" },
        h("span", {}, "Definition (JSON, added to the rows above)"),
        h("textarea", { name: "definition_json", rows: 2, placeholder: '{"max-length": 1000, "overflow": "reject-publish"}' }),
      ),
    ],
    "Add / update policy",
    async (values) => {
      fill(refusal);
      const body = {
        pattern: values.pattern,
        "apply-to": values["apply-to"],
        priority: values.priority.trim() ? typedValue("", values.priority, "number") : 0,
        definition: definitionOf(rows, values.definition_json),
      };
      try {
        await api("PUT", `/api/policies/${seg(values.vhost)}/${seg(values.name)}`, body);
      } catch (error) {
        // A notice goes after a few seconds; what was wrong stays by the form.
        fill(refusal, h("strong", {}, "Refused: "), error.message.trim().replace(/\n\s*\n/g, "\n"));
        throw error;
      }
      return `Policy ${values.name} set in ${values.vhost}.`;
    },
  );
  node.insertBefore(refusal, node.querySelector("button[type=submit]"));
  return node;
}

// A queue's or an exchange's policy, linking to the policies page; null when none.
export function policyLink(name) {
  return name ? h("a", { href: "#/policies", class: "policy-name" }, name) : null;
}

// Fills the form with a listed policy, to change it.
function edit(formNode, rows, policy) {
  formNode.elements.vhost.value = policy.vhost;
  formNode.elements.name.value = policy.name;
  formNode.elements.pattern.value = policy.pattern;
  formNode.elements["apply-to"].value = policy["apply-to"];
  formNode.elements.priority.value = String(policy.priority);
  formNode.elements.definition_json.value = "";
  setRows(rows, policy.definition);
  formNode.scrollIntoView({ block: "start" });
}

function definitionView(definition) {
  return h(
    "span",
    { class: "definition" },
    Object.entries(definition).map(([key, value]) => h("span", { class: "tag def" }, `${key}: ${shownValue(value)}`)),
  );
}

export function policiesPage(root) {
  const count = h("span", { class: "count" });
  const list = h("div", { id: "policies-list", class: "list-region" });
  const rows = h("div", { class: "definition-rows", id: "definition-rows" });
  setRows(rows, {});
  const refusal = h("p", { class: "form-error", id: "policy-refusal", role: "alert" });
  const formNode = policyForm(rows, refusal);
  root.append(h("h1", {}, "Policies ", count), list, section("Add or update a policy", formNode));
  return {
    title: "Policies",
    async refresh() {
      let policies;
      try {
        policies = await get("/api/policies");
      } catch (error) {
        // Only administrators and policymakers have a policies list.
        if (!(error instanceof ApiError && error.status === 401)) throw error;
        fill(list, h("p", { class: "empty" }, `Policies are not shown to this user: ${error.message}`));
        return;
      }
      count.textContent = `(${policies.length})`;
      fill(list, policyTable(policies, (policy) => edit(formNode, rows, policy)));
    },
  };
}

function policyTable(policies, onEdit) {
  const sorted = [...policies].sort((a, b) => a.vhost.localeCompare(b.vhost) || a.name.localeCompare(b.name));
  return table(
    [
      { title: "Virtual host", cell: (p) => p.vhost },
      { title: "Name", cell: (p) => h("span", { class: "mono" }, p.name) },
      { title: "Pattern", cell: (p) => h("code", {}, p.pattern) },
      { title: "Apply to", cell: (p) => p["apply-to"] },
      { title: "Priority", cell: (p) => String(p.priority), num: true },
      { title: "Definition", cell: (p) => definitionView(p.definition) },
      {
        title: "",
        cell: (p) =>
          h(
            "span",
            { class: "row-actions" },
            h("button", { type: "button", class: "secondary", "data-edit-policy": `${p.vhost} ${p.name}`, onclick: () => onEdit(p) }, "Edit"),
            dangerButton("Delete", async () => {
              await api("DELETE", `/api/policies/${seg(p.vhost)}/${seg(p.name)}`);
              return `Policy ${p.name} deleted from ${p.vhost}.`;
            }, { "data-policy": `${p.vhost} ${p.name}` }),
          ),
      },
    ],
    sorted,
    "No policies: queues and exchanges have their own arguments only.",
  );
}
