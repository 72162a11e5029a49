// The UI's frame: the login form, the navigation, which page the URL's #fragment shows,
// and the refresh every 5 seconds (the broker samples its rates as often).

import { ApiError, get, loggedIn, login, logout, userName } from "./api.js";
import { overviewPage } from "./overview.js";
import { channelsPage, connectionsPage } from "./live.js";
import { exchangePage, exchangesPage } from "./exchanges.js";
import { queuePage, queuesPage } from "./queues.js";
import { usersPage, vhostsPage } from "./access.js";
import { policiesPage } from "./policies.js";

const REFRESH_MS = 5000;

// #/name/segment/segment -> the page, given the decoded segments.
const PAGES = {
  "": overviewPage,
  connections: connectionsPage,
  channels: channelsPage,
  exchanges: exchangesPage,
  exchange: exchangePage,
  queues: queuesPage,
  queue: queuePage,
  users: usersPage,
  vhosts: vhostsPage,
  policies: policiesPage,
};
const NAV = { exchange: "exchanges", queue: "queues", "": "overview" };

let current = null; // {refresh} of the page shown
let refreshing = false;
let again = false;
let refreshes = 0;

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const name = parts[0] in PAGES ? parts[0] : "";
  return { name, args: parts.slice(1).map(decodeURIComponent) };
}

async function show() {
  const { name, args } = route();
  const root = document.getElementById("page");
  root.replaceChildren();
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === (NAV[name] || name));
  }
  current = PAGES[name](root, ...args);
  document.title = `${current.title} · kanin`;
  await refresh();
}

// One refresh at a time; one asked for meanwhile (a page shown, a change made) runs
// right after, so what is shown is never older than the last change.
async function refresh() {
  if (current === null) return;
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  try {
    do {
      again = false;
      await refreshOnce(current);
    } while (again && current !== null);
  } finally {
    refreshing = false;
  }
}

async function refreshOnce(shown) {
  try {
    await shown.refresh();
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    document.getElementById("refreshed").textContent = `Updated ${new Date().toTimeString().slice(0, 8)}`;
    document.getElementById("refreshed").classList.remove("stale");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && !(await stillLoggedIn())) {
      logout();
      showLogin("Your credentials were refused; log in again.");
    } else {
      const stamp = document.getElementById("refreshed");
      stamp.textContent = `Update failed: ${error.message}`;
      stamp.classList.add("stale");
    }
  }
}

// A 401 is also the API's answer to a user without the tag or permission a page needs:
// only credentials no longer accepted end the session.
async function stillLoggedIn() {
  try {
    await get("/api/whoami");
    return true;
  } catch {
    return false;
  }
}

function showLogin(message = "") {
  current = null;
  document.getElementById("shell").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message;
  document.getElementById("username").focus();
}

function showShell() {
  document.getElementById("login").hidden = true;
  document.getElementById("shell").hidden = false;
  document.getElementById("user").textContent = userName();
  show();
}

async function submitLogin(event) {
  event.preventDefault();
  const form = event.target;
  login(form.username.value, form.password.value);
  try {
    const whoami = await get("/api/whoami");
    sessionStorage.setItem("kanin.tags", [].concat(whoami.tags).join(","));
  } catch (error) {
    logout();
    const refused = error instanceof ApiError && error.status === 401;
    showLogin(refused ? `Login failed: ${error.message}` : `The broker did not answer: ${error.message}`);
    return;
  }
  form.password.value = "";
  showShell();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", submitLogin);
  document.getElementById("logout").addEventListener("click", () => {
    logout();
    showLogin();
  });
  window.addEventListener("hashchange", () => current !== null && show());
  window.addEventListener("kanin:changed", refresh);
  // Not while a destructive button waits for its second click: drawn anew, it would
  // lose that, and the click meant to confirm would only arm it again.
  setInterval(() => document.querySelector("button.armed") || refresh(), REFRESH_MS);
  if (loggedIn()) showShell();
  else showLogin();
});
