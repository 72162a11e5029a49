// Connections (close one) and channels: what lives while clients are connected.

import { api, fmtBytes, fmtNumber, get, h, seg } from "./api.js";
import { dangerButton, fill, pager, table } from "./widgets.js";

const PAGE_SIZE = 100;

// A list page over a paged API listing: a title, a table refreshed in place, a pager.
export function listPage(root, title, path, columns, emptyText, extra = []) {
  let page = 1;
  const count = h("span", { class: "count" });
  const region = h("div", { class: "list-region", id: `${title.toLowerCase().replace(/\s+/g, "-")}-list` });
  root.append(h("h1", {}, title, " ", count), region, ...extra);
  const view = {
    title,
    async refresh() {
      const joiner = path.includes("?") ? "&" : "?";
      const listing = await get(`${path}${joiner}page=${page}&page_size=${PAGE_SIZE}`);
      count.textContent = `(${listing.total_count})`;
      fill(
        region,
        table(columns, listing.items, emptyText),
        pager(listing, (next) => {
          page = next;
          window.dispatchEvent(new Event("kanin:changed"));
        }),
      );
    },
  };
  return view;
}

export function connectionsPage(root) {
  return listPage(
    root,
    "Connections",
    "/api/connections?sort=name",
    [
      { title: "Name", cell: (c) => h("span", { class: "mono" }, c.name) },
      { title: "Client", cell: (c) => c.user_provided_name || clientName(c) },
      { title: "User", cell: (c) => c.user },
      { title: "Virtual host", cell: (c) => c.vhost },
      { title: "State", cell: (c) => h("span", { class: `state ${c.state}` }, c.state) },
      { title: "Channels", cell: (c) => fmtNumber(c.channels), num: true },
      { title: "Heartbeat", cell: (c) => (c.timeout ? `${c.timeout}s` : "off"), num: true },
      { title: "Received", cell: (c) => fmtBytes(c.recv_oct), num: true },
      { title: "Sent", cell: (c) => fmtBytes(c.send_oct), num: true },
      {
        title: "",
        cell: (c) =>
          dangerButton("Close", async () => {
            await api("DELETE", `/api/connections/${seg(c.name)}`, undefined, { "X-Reason": "Closed from the kanin management UI" });
            return `Connection ${c.name} closed.`;
          }, { "data-connection": c.name }),
      },
    ],
    "No clients are connected.",
  );
}

function clientName(connection) {
  const properties = connection.client_properties || {};
  return [properties.product, properties.version].filter(Boolean).join(" ");
}

export function channelsPage(root) {
  return listPage(
    root,
    "Channels",
    "/api/channels?sort=name",
    [
      { title: "Channel", cell: (c) => h("span", { class: "mono" }, c.name) },
      { title: "User", cell: (c) => c.user },
      { title: "Virtual host", cell: (c) => c.vhost },
      { title: "Mode", cell: (c) => [c.confirm ? "confirm" : null, c.transactional ? "transactional" : null].filter(Boolean).join(", ") },
      { title: "State", cell: (c) => h("span", { class: `state ${c.state}` }, c.state) },
      { title: "Prefetch", cell: (c) => (c.prefetch_count ? fmtNumber(c.prefetch_count) : "none"), num: true },
      { title: "Consumers", cell: (c) => fmtNumber(c.consumer_count), num: true },
      { title: "Unacked", cell: (c) => fmtNumber(c.messages_unacknowledged), num: true },
      { title: "Unconfirmed", cell: (c) => fmtNumber(c.messages_unconfirmed), num: true },
    ],
    "No channels are open.",
  );
}
