// Users and their permissions, and virtual hosts.

import { api, fmtNumber, get, h, seg } from "./api.js";
import { setOptions, vhostSelect } from "./forms.js";
import { dangerButton, field, fill, form, input, section, select, table } from "./widgets.js";

const TAGS = [
  ["administrator", "administrator"],
  ["monitoring", "monitoring"],
  ["policymaker", "policymaker"],
  ["management", "management"],
  ["", "(none: AMQP only)"],
];

export function usersPage(root) {
  const users = h("div", { id: "users-list", class: "list-region" });
  const permissions = h("div", { id: "permissions-list" });
  const userChoice = select("user", [], "");
  const addUser = form(
    "user-form",
    "Add a user",
    [
      field("Name", input("name", { required: true, autocomplete: "off" })),
      field("Password", input("password", { type: "password", autocomplete: "new-password" })),
      field("Tags", select("tags", TAGS, "management")),
    ],
    "Add user",
    async (values) => {
      await api("PUT", `/api/users/${seg(values.name)}`, { password: values.password, tags: values.tags });
      return `User ${values.name} added.`;
    },
  );
  const grant = form(
    "permission-form",
    "Set permissions",
    [
      field("User", userChoice),
      field("Virtual host", vhostSelect()),
      field("Configure", input("configure", { value: ".*" }), "regular expression"),
      field("Write", input("write", { value: ".*" })),
      field("Read", input("read", { value: ".*" })),
    ],
    "Set permissions",
    async (values) => {
      const { configure, write, read } = values;
      await api("PUT", `/api/permissions/${seg(values.vhost)}/${seg(values.user)}`, { configure, write, read });
      return `Permissions of ${values.user} in ${values.vhost} set.`;
    },
  );
  root.append(
    h("h1", {}, "Users"),
    users,
    section("Add a user", addUser),
    section("Permissions", permissions, grant),
  );
  return {
    title: "Users",
    async refresh() {
      const [userList, permissionList] = await Promise.all([get("/api/users"), get("/api/permissions")]);
      setOptions(userChoice, userList.map((user) => user.name));
      fill(users, userTable(userList, permissionList));
      fill(permissions, permissionTable(permissionList));
    },
  };
}

function userTable(users, permissions) {
  return table(
    [
      { title: "Name", cell: (u) => h("span", { class: "mono" }, u.name) },
      { title: "Tags", cell: (u) => (u.tags.length ? u.tags.map((tag) => h("span", { class: "tag" }, tag)) : "none") },
      { title: "Virtual hosts", cell: (u) => permissions.filter((p) => p.user === u.name).map((p) => p.vhost).join(", ") || "none" },
      { title: "Password", cell: (u) => (u.password_hash ? "set" : "none") },
      {
        title: "",
        cell: (u) =>
          dangerButton("Delete", async () => {
            await api("DELETE", `/api/users/${seg(u.name)}`);
            return `User ${u.name} deleted.`;
          }, { "data-user": u.name }),
      },
    ],
    users,
  );
}

function permissionTable(permissions) {
  return table(
    [
      { title: "User", cell: (p) => p.user },
      { title: "Virtual host", cell: (p) => p.vhost },
      { title: "Configure", cell: (p) => h("code", {}, p.configure) },
      { title: "Write", cell: (p) => h("code", {}, p.write) },
      { title: "Read", cell: (p) => h("code", {}, p.read) },
      {
        title: "",
        cell: (p) =>
          dangerButton("Clear", async () => {
            await api("DELETE", `/api/permissions/${seg(p.vhost)}/${seg(p.user)}`);
            return `Permissions of ${p.user} in ${p.vhost} cleared.`;
          }, { "data-permission": `${p.vhost} ${p.user}` }),
      },
    ],
    permissions,
    "No permissions granted.",
  );
}

export function vhostsPage(root) {
  const list = h("div", { id: "vhosts-list", class: "list-region" });
  const add = form("vhost-form", "Add a virtual host", [field("Name", input("name", { required: true }))], "Add virtual host", async (values) => {
    await api("PUT", `/api/vhosts/${seg(values.name)}`, {});
    return `Virtual host ${values.name} added.`;
  });
  root.append(h("h1", {}, "Virtual hosts"), list, section("Add a virtual host", add));
  return {
    title: "Virtual hosts",
    async refresh() {
      const vhosts = await get("/api/vhosts");
      fill(
        list,
        table(
          [
            { title: "Name", cell: (v) => h("span", { class: "mono" }, v.name) },
            { title: "Ready", cell: (v) => fmtNumber(v.messages_ready), num: true },
            { title: "Unacked", cell: (v) => fmtNumber(v.messages_unacknowledged), num: true },
            { title: "Total", cell: (v) => fmtNumber(v.messages), num: true },
            {
              title: "",
              cell: (v) =>
                dangerButton("Delete", async () => {
                  await api("DELETE", `/api/vhosts/${seg(v.name)}`);
                  return `Virtual host ${v.name} deleted.`;
                }, { "data-vhost": v.name }),
            },
          ],
          vhosts,
        ),
      );
    },
  };
}
