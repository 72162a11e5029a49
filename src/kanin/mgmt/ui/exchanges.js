// Exchanges: the list (declare one), and one exchange (its rates, bindings, publish).

import { api, exchangeSeg, features, fmtRate, get, h, seg } from "./api.js";
import { lineChart, ratesFromSamples } from "./chart.js";
import { argumentsField, bindingForm, parseObject, publishForm, unbind, vhostSelect } from "./forms.js";
import { listPage } from "./live.js";
import { policyLink } from "./policies.js";
import { dangerButton, facts, field, fill, form, input, link, section, select, table } from "./widgets.js";

export function exchangeHref(vhost, name) {
  return `#/exchange/${seg(vhost)}/${exchangeSeg(name)}`;
}

function rate(exchange, key) {
  return fmtRate(exchange.message_stats?.[`${key}_details`]);
}

export function exchangesPage(root) {
  const declare = form(
    "exchange-form",
    "Add an exchange",
    [
      field("Virtual host", vhostSelect()),
      field("Name", input("name", { required: true })),
      field("Type", select("type", ["direct", "fanout", "topic", "headers", "x-delayed-message", "x-message-deduplication"], "direct")),
      field("Durable", select("durable", [["true", "yes"], ["false", "no"]], "true")),
      field("Auto delete", select("auto_delete", [["false", "no"], ["true", "yes"]], "false")),
      field("Internal", select("internal", [["false", "no"], ["true", "yes"]], "false")),
      argumentsField(),
    ],
    "Add exchange",
    async (values) => {
      await api("PUT", `/api/exchanges/${seg(values.vhost)}/${seg(values.name)}`, {
        type: values.type,
        durable: values.durable === "true",
        auto_delete: values.auto_delete === "true",
        internal: values.internal === "true",
        arguments: parseObject(values.arguments, "Arguments"),
      });
      return `Exchange ${values.name} declared.`;
    },
  );
  return listPage(
    root,
    "Exchanges",
    "/api/exchanges?sort=name",
    [
      { title: "Virtual host", cell: (x) => x.vhost },
      { title: "Name", cell: (x) => link(exchangeHref(x.vhost, x.name), x.name || "(AMQP default)") },
      { title: "Type", cell: (x) => x.type },
      { title: "Features", cell: (x) => features(x) },
      { title: "Policy", cell: (x) => policyLink(x.policy) },
      { title: "Rate in", cell: (x) => rate(x, "publish_in"), num: true },
      { title: "Rate out", cell: (x) => rate(x, "publish_out"), num: true },
    ],
    "No exchanges.",
    [section("Add an exchange", declare)],
  );
}

export function exchangePage(root, vhost = "/", urlName = "") {
  const name = urlName === "amq.default" ? "" : urlName;
  const path = `/api/exchanges/${seg(vhost)}/${exchangeSeg(name)}`;
  const details = h("div", { id: "exchange-details" });
  const chart = h("div", { class: "charts" });
  const bindings = h("div", { id: "bindings" });
  const parts = [
    h("p", { class: "crumbs" }, link("#/exchanges", "Exchanges"), " › ", vhost),
    h("h1", {}, "Exchange ", h("span", { class: "mono" }, name || "(AMQP default)")),
    h("div", { class: "columns" }, section("Details", details), section("Message rates over the last minute", chart)),
    section("Bindings from this exchange", bindings, name ? bindingForm(vhost, { source: name }) : null),
    section("Publish", publishForm(vhost, name)),
    name.startsWith("amq.") || !name
      ? null
      : section(
          "Delete",
          dangerButton("Delete exchange", async () => {
            await api("DELETE", path);
            location.hash = "#/exchanges";
            return `Exchange ${name} deleted.`;
          }, { id: "delete-exchange" }),
        ),
  ];
  root.append(...parts.filter(Boolean));
  return {
    title: `Exchange ${name || "(AMQP default)"}`,
    async refresh() {
      const [exchange, outgoing] = await Promise.all([
        get(`${path}?msg_rates_age=60&msg_rates_incr=5`),
        get(`${path}/bindings/source`),
      ]);
      fill(
        details,
        facts([
          ["Virtual host", exchange.vhost],
          ["Type", exchange.type],
          ["Features", features(exchange)],
          ["Arguments", h("code", {}, JSON.stringify(exchange.arguments))],
          ["Policy", h("span", { id: "exchange-policy" }, policyLink(exchange.policy) || "none")],
          exchange.kanin_delayed_messages !== undefined ? ["Delayed messages", String(exchange.kanin_delayed_messages)] : null,
        ]),
      );
      const stats = exchange.message_stats || {};
      const series = ["publish_in", "publish_out"].map((key, index) => ({
        label: ["In", "Out"][index],
        points: ratesFromSamples(stats[`${key}_details`]?.samples || []),
      }));
      fill(chart, lineChart("Messages per second", series, "/s"));
      fill(
        bindings,
        table(
          [
            { title: "To", cell: (b) => `${b.destination_type} ${b.destination}` },
            { title: "Routing key", cell: (b) => h("span", { class: "mono" }, b.routing_key) },
            { title: "Arguments", cell: (b) => (Object.keys(b.arguments).length ? JSON.stringify(b.arguments) : "") },
            { title: "", cell: (b) => (name ? dangerButton("Unbind", () => unbind(vhost, b)) : "") },
          ],
          outgoing,
          name ? "No bindings: messages published here are routed nowhere." : "The default exchange routes to every queue by its name.",
        ),
      );
    },
  };
}
