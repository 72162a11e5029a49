// The management API as the pages use it: the user's credentials, requests, and the
// small DOM and formatting helpers every page shares. Everything shown is built as DOM
// nodes with text content, never as HTML from data: names come from clients.

const AUTH_KEY = "kanin.auth";

export function login(user, password) {
  sessionStorage.setItem(AUTH_KEY, btoa(unescape(encodeURIComponent(`${user}:${password}`))));
}

export function logout() {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem("kanin.tags");
}

// The user's tags, as /api/whoami gave them at login.
export function hasTag(...tags) {
  const held = (sessionStorage.getItem("kanin.tags") || "").split(",");
  return tags.some((tag) => held.includes(tag));
}

export function loggedIn() {
  return sessionStorage.getItem(AUTH_KEY) !== null;
}

export function userName() {
  const token = sessionStorage.getItem(AUTH_KEY);
  if (token === null) return "";
  return decodeURIComponent(escape(atob(token))).split(":")[0];
}

export class ApiError extends Error {
  constructor(status, error, reason) {
    super(reason || error || `HTTP ${status}`);
    this.status = status;
    this.error = error;
  }
}

// One request: JSON in and out; an ApiError with the API's reason when it refuses.
export async function api(method, path, body, headers = {}) {
  const options = {
    method,
    headers: {
      Authorization: `Basic ${sessionStorage.getItem(AUTH_KEY) || ""}`,
      "X-Requested-With": "XMLHttpRequest", // a 401 then opens no browser dialog
      ...headers,
    },
  };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const reply = await fetch(path, options);
  const text = await reply.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!reply.ok) {
    const error = data && typeof data === "object" ? data : {};
    throw new ApiError(reply.status, error.error, error.reason);
  }
  return data;
}

export const get = (path) => api("GET", path);

// A name as one path segment ("/" is %2F); the default exchange is "amq.default".
export function seg(name) {
  return encodeURIComponent(name);
}

export function exchangeSeg(name) {
  return seg(name === "" ? "amq.default" : name);
}

// h("td", {class: "num"}, "12") -> <td class="num">12</td>; children may be nodes,
// strings, numbers, arrays of them, or null (skipped).
export function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "value") node.value = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function fmtNumber(value) {
  if (value === undefined || value === null) return "";
  return Number(value).toLocaleString("en-US");
}

export function fmtRate(details) {
  if (!details || typeof details.rate !== "number") return "";
  const rate = details.rate;
  return `${rate >= 100 ? Math.round(rate).toLocaleString("en-US") : rate.toFixed(1)}/s`;
}

export function fmtBytes(value) {
  if (typeof value !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let index = 0;
  while (value >= 1024 && index < units.length - 1) {
    value /= 1024;
    index += 1;
  }
  return `${value.toFixed(index ? 1 : 0)} ${units[index]}`;
}

export function fmtDuration(ms) {
  let seconds = Math.floor(ms / 1000);
  const days = Math.floor(seconds / 86400);
  seconds -= days * 86400;
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${minutes}m`;
  return `${minutes}m ${seconds % 60}s`;
}

// RabbitMQ's feature letters: D durable, AD auto-delete, I internal, Excl exclusive,
// Args when there are arguments (their names in the tooltip).
export function features(object) {
  const tags = [];
  if (object.durable) tags.push(["D", "durable"]);
  if (object.auto_delete) tags.push(["AD", "auto-delete"]);
  if (object.internal) tags.push(["I", "internal"]);
  if (object.exclusive) tags.push(["Excl", "exclusive"]);
  const argumentNames = Object.keys(object.arguments || {});
  if (argumentNames.length) tags.push(["Args", argumentNames.join(", ")]);
  return tags.map(([label, title]) => h("span", { class: "tag", title }, label));
}
