// The pieces the pages are built from: tables, forms, buttons that ask twice, notices.

import { h } from "./api.js";

// columns: [{title, cell: (row) => node|string, num: bool}]
export function table(columns, rows, emptyText = "Nothing to show.") {
  if (!rows.length) return h("p", { class: "empty" }, emptyText);
  return h(
    "table",
    { class: "list" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)))),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h("tr", {}, columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(row)))),
      ),
    ),
  );
}

// key/value pairs, for one object's details.
export function facts(pairs) {
  return h(
    "table",
    { class: "facts" },
    h("tbody", {}, pairs.filter(Boolean).map(([key, value]) => h("tr", {}, h("th", {}, key), h("td", {}, value)))),
  );
}

export function link(href, text) {
  return h("a", { href }, text);
}

// A destructive action: the first click arms the button, a second within 4 s does it.
export function dangerButton(label, action, attributes = {}) {
  const button = h("button", { class: "danger", type: "button", ...attributes }, label);
  let armed = null;
  button.addEventListener("click", async () => {
    if (armed === null) {
      button.textContent = `Confirm: ${label.toLowerCase()}`;
      button.classList.add("armed");
      armed = setTimeout(() => {
        armed = null;
        button.textContent = label;
        button.classList.remove("armed");
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    button.disabled = true;
    await runAction(action);
    button.disabled = false;
    button.textContent = label;
    button.classList.remove("armed");
  });
  return button;
}

// Runs an action, showing its success message or the API's refusal.
export async function runAction(action) {
  const shown = location.hash;
  try {
    const message = await action();
    if (message) notify(message, "ok");
    // The page shows the change at once; unless the action left it (a deleted queue's
    // page goes to the list, which is shown fresh).
    if (location.hash === shown) window.dispatchEvent(new Event("kanin:changed"));
    return true;
  } catch (error) {
    notify(error.message, "error");
    return false;
  }
}

export function notify(text, kind = "ok") {
  const area = document.getElementById("notices");
  const notice = h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
  area.append(notice);
  setTimeout(() => notice.remove(), kind === "error" ? 8000 : 4000);
}

export function field(label, input, hint) {
  return h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);
}

export function input(name, attributes = {}) {
  return h("input", { name, id: attributes.id || null, type: "text", ...attributes });
}

export function select(name, options, value, attributes = {}) {
  return h(
    "select",
    { name, ...attributes },
    options.map((option) => {
      const [optionValue, text] = Array.isArray(option) ? option : [option, option];
      return h("option", { value: optionValue, selected: optionValue === value }, text);
    }),
  );
}

// A form whose submit runs `action(values)`; the values by input name.
export function form(id, title, fields, submitLabel, action) {
  const node = h(
    "form",
    { id, class: "panel-form" },
    title ? h("h3", {}, title) : null,
    h("div", { class: "fields" }, fields),
    h("button", { type: "submit" }, submitLabel),
  );
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = {};
    for (const element of node.elements) {
      if (!element.name) continue;
      values[element.name] = element.type === "checkbox" ? element.checked : element.value;
    }
    if (await runAction(() => action(values, node))) node.dispatchEvent(new Event("kanin:done"));
  });
  return node;
}

export function section(title, ...content) {
  return h("section", { class: "panel" }, h("h2", {}, title), content);
}

// A list's page picker; `onChange(page)` shows another page.
export function pager(listing, onChange) {
  if (!listing || listing.page_count <= 1) return null;
  const { page, page_count: pages, total_count: total } = listing;
  return h(
    "div",
    { class: "pager" },
    h("button", { type: "button", disabled: page <= 1, onclick: () => onChange(page - 1) }, "‹ Previous"),
    h("span", {}, `Page ${page} of ${pages} (${total} in all)`),
    h("button", { type: "button", disabled: page >= pages, onclick: () => onChange(page + 1) }, "Next ›"),
  );
}

// Replaces a live region's content (keeps the region, so the page's layout stays put).
export function fill(region, ...content) {
  region.replaceChildren(...content.flat().filter((c) => c !== null && c !== undefined));
}
