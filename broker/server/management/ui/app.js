// Warren's web UI: hash routes drawn from RabbitMQ-shaped JSON API answers.
// Every value from the API reaches the page through textContent or an attribute set by
// the DOM (el() below), never through innerHTML: names are user input.
"use strict";

const REFRESH_MS = 5000;        // how often the current page polls the API
const CHART_SAMPLES = 120;      // overview samples kept: 10 minutes at REFRESH_MS

// ---- the API ---------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, body) {
    super(body && body.reason ? `${body.error}: ${body.reason}` : `HTTP ${status}`);
    this.status = status;
    this.reason = body && body.reason;
  }
}

function credentials() {
  return {user: sessionStorage.getItem("warren.user"),
          password: sessionStorage.getItem("warren.password")};
}

async function api(method, path, body, headers) {
  const {user, password} = credentials();
  // credentials "omit": the browser adds no credentials of its own and, on a 401 with
  // a Basic challenge, does not open its login dialog; the page shows the refusal.
  const request = {method, credentials: "omit", headers: {
    "authorization": "Basic " + btoa(unescape(encodeURIComponent(`${user}:${password}`))),
    "x-requested-with": "XMLHttpRequest", ...(headers || {})}};
  if (body !== undefined) {
    request.headers["content-type"] = "application/json";
    request.body = JSON.stringify(body);
  }
  const response = await fetch(path, request);
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiFailure(response.status, parsed);
  return parsed;
}

const segment = encodeURIComponent;
const queuePath = (vhost, name) => `/api/queues/${segment(vhost)}/${segment(name)}`;
const exchangePath = (vhost, name) =>
  `/api/exchanges/${segment(vhost)}/${segment(name || "amq.default")}`;

// ---- DOM building ----------------------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function rate(value) {
  return value === undefined ? "–" : `${Number(value).toFixed(1)}/s`;
}

// A table of `rows`; `columns` are [heading, cell(row), sortKey?] triples.
function table(id, columns, rows, sorting) {
  const head = el("tr", {}, columns.map(([heading, , key]) => {
    if (!key || !sorting) return el("th", {}, heading);
    const marker = sorting.key === key ? (sorting.reverse ? " ▼" : " ▲") : "";
    return el("th", {class: "sortable", "data-sort": key,
                     onclick: () => sorting.by(key)}, heading + marker);
  }));
  const body = rows.length
    ? rows.map(row => el("tr", {}, columns.map(([, cell]) => el("td", {}, cell(row)))))
    : [el("tr", {}, el("td", {colspan: columns.length, class: "empty"}, "Nothing here"))];
  return el("table", {id}, el("thead", {}, head), el("tbody", {}, body));
}

function definitionList(pairs) {
  return el("dl", {class: "facts"},
            pairs.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, show(value))]));
}

function field(label, input) {
  return el("label", {}, label, " ", input);
}

function tell(message, isError) {
  const notice = document.getElementById("notice");
  notice.textContent = message;
  notice.className = isError ? "error" : "ok";
}

// Runs an action from a form or button, reporting success or the API's reason.
async function act(action, success) {
  try {
    await action();
    if (success) tell(success, false);
    return true;
  } catch (failure) {
    tell(failure.message, true);
    return false;
  }
}

function formValues(form) {
  return Object.fromEntries(new FormData(form).entries());
}

// ---- pages -----------------------------------------------------------------------

const samples = [];   // overview samples: {time, publish, deliver, ack, ready, unacked}

async function overviewPage(view) {
  const overview = await api("GET", "/api/overview");
  const stats = overview.message_stats || {};
  const queued = overview.queue_totals || {};
  const totals = overview.object_totals || {};
  samples.push({time: Date.now(),
                publish: (stats.publish_details || {}).rate || 0,
                deliver: (stats.deliver_get_details || {}).rate || 0,
                ack: (stats.ack_details || {}).rate || 0,
                ready: queued.messages_ready || 0,
                unacked: queued.messages_unacknowledged || 0});
  if (samples.length > CHART_SAMPLES) samples.shift();
  view.replaceChildren(
    el("h1", {}, "Overview"),
    el("section", {class: "cards"},
       card("Publish", rate((stats.publish_details || {}).rate), "rate-publish"),
       card("Deliver / get", rate((stats.deliver_get_details || {}).rate), "rate-deliver"),
       card("Acknowledge", rate((stats.ack_details || {}).rate), "rate-ack"),
       card("Ready", queued.messages_ready, "queued-ready"),
       card("Unacknowledged", queued.messages_unacknowledged, "queued-unacked"),
       card("Total queued", queued.messages, "queued-total")),
    el("h2", {}, "Message rates"),
    chart(["publish", "deliver", "ack"], "/s"),
    el("h2", {}, "Queued messages"),
    chart(["ready", "unacked"], ""),
    el("h2", {}, "Totals"),
    el("section", {class: "cards"},
       ["connections", "channels", "exchanges", "queues", "consumers"].map(
         key => card(key[0].toUpperCase() + key.slice(1), totals[key], `total-${key}`))),
    el("p", {class: "muted"},
       overview.warren_version
         ? `Warren ${overview.warren_version} as RabbitMQ ${overview.rabbitmq_version}`
         : `${overview.product_name || "RabbitMQ"} ${overview.product_version || ""}`,
       overview.node ? ` on ${overview.node}` : ""));
}

function card(label, value, id) {
  return el("div", {class: "card", id},
            el("div", {class: "label"}, label), el("div", {class: "value"}, show(value)));
}

// An inline SVG line chart of `series` over the kept samples.
function chart(series, unit) {
  const NS = "http://www.w3.org/2000/svg";
  const width = 720, height = 160, left = 48, bottom = 20;
  const svgNode = (tag, attributes, text) => {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const top = Math.max(1, ...samples.flatMap(s => series.map(name => s[name])));
  const x = index => left + (width - left - 8) * (samples.length < 2 ? 1 : index / (samples.length - 1));
  const y = value => 8 + (height - bottom - 8) * (1 - value / top);
  const svg = svgNode("svg", {viewBox: `0 0 ${width} ${height}`, class: "chart",
                              role: "img", "aria-label": series.join(", ")});
  for (const fraction of [0, 0.5, 1]) {
    svg.append(svgNode("line", {x1: left, x2: width - 8, y1: y(top * fraction),
                                y2: y(top * fraction), class: "grid"}));
    svg.append(svgNode("text", {x: left - 6, y: y(top * fraction) + 4, class: "axis"},
                       `${+(top * fraction).toFixed(1)}${unit}`));
  }
  const seconds = samples.length ? Math.round((Date.now() - samples[0].time) / 1000) : 0;
  const span = seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
  svg.append(svgNode("text", {x: left, y: height - 4, class: "axis start"}, `${span} ago`));
  svg.append(svgNode("text", {x: width - 8, y: height - 4, class: "axis"}, "now"));
  series.forEach((name, index) => {
    const points = samples.map((s, i) => `${x(i).toFixed(1)},${y(s[name]).toFixed(1)}`);
    svg.append(svgNode("polyline", {points: points.join(" "), class: `series s${index}`}));
  });
  const legend = el("div", {class: "legend"}, series.map(
    (name, index) => el("span", {class: `key s${index}`}, name)));
  return el("div", {class: "chart-box"}, svg, legend);
}

// List pages keep their filter, sort and page between refreshes.
const listState = {};

function listPage(kind, title, columns, defaultSort) {
  return async view => {
    const state = listState[kind] ||= {name: "", key: defaultSort, reverse: false, page: 1};
    const query = new URLSearchParams({page: state.page, page_size: 100, name: state.name,
                                       use_regex: false, sort: state.key,
                                       sort_reverse: state.reverse, pagination: true});
    const answer = await api("GET", `/api/${kind}?${query}`);
    const sorting = {key: state.key, reverse: state.reverse, by: key => {
      state.reverse = state.key === key ? !state.reverse : false;
      state.key = key;
      render();
    }};
    const filter = el("input", {id: `${kind}-filter`, type: "search", value: state.name,
                                placeholder: "Filter by name"});
    const filterForm = el("form", {class: "inline", onsubmit: event => {
      event.preventDefault();
      state.name = filter.value;
      state.page = 1;
      render();
    }}, filter, el("button", {type: "submit"}, "Filter"));
    const pager = el("span", {class: "pager"},
      el("button", {type: "button", disabled: state.page <= 1,
                    onclick: () => { state.page -= 1; render(); }}, "‹ Previous"),
      ` page ${answer.page} of ${Math.max(1, answer.page_count)} (${answer.filtered_count} of ${answer.total_count}) `,
      el("button", {type: "button", disabled: state.page >= answer.page_count,
                    onclick: () => { state.page += 1; render(); }}, "Next ›"));
    view.replaceChildren(el("h1", {}, title), el("div", {class: "toolbar"}, filterForm, pager),
                         table(`${kind}-table`, columns, answer.items, sorting));
  };
}

const link = (href, text) => el("a", {href}, text);
const queueLink = q => link(`#/queues/${segment(q.vhost)}/${segment(q.name)}`, q.name);
const exchangeLink = x => link(`#/exchanges/${segment(x.vhost)}/${segment(x.name || "amq.default")}`,
                               x.name || "(AMQP default)");
const connectionLink = c => link(`#/connections/${segment(c.name)}`, c.name);

const queuesPage = listPage("queues", "Queues", [
  ["Virtual host", q => q.vhost, "vhost"],
  ["Name", queueLink, "name"],
  ["Type", q => q.type, "type"],
  ["Features", q => [q.durable && "durable", q.auto_delete && "auto-delete",
                     q.exclusive && "exclusive"].filter(Boolean).join(" ")],
  ["State", q => q.state, "state"],
  ["Ready", q => show(q.messages_ready), "messages_ready"],
  ["Unacked", q => show(q.messages_unacknowledged), "messages_unacknowledged"],
  ["Total", q => show(q.messages), "messages"],
  ["Consumers", q => show(q.consumers), "consumers"],
], "name");

const exchangesPage = listPage("exchanges", "Exchanges", [
  ["Virtual host", x => x.vhost, "vhost"],
  ["Name", exchangeLink, "name"],
  ["Type", x => x.type, "type"],
  ["Features", x => [x.durable && "durable", x.auto_delete && "auto-delete",
                     x.internal && "internal"].filter(Boolean).join(" ")],
], "name");

const connectionsPage = listPage("connections", "Connections", [
  ["Virtual host", c => c.vhost, "vhost"],
  ["Name", connectionLink, "name"],
  ["Client name", c => show(c.user_provided_name)],
  ["User", c => c.user, "user"],
  ["State", c => c.state, "state"],
  ["Protocol", c => c.protocol],
  ["Channels", c => show(c.channels), "channels"],
], "name");

const channelsPage = listPage("channels", "Channels", [
  ["Virtual host", c => c.vhost, "vhost"],
  ["Channel", c => c.name, "name"],
  ["User", c => c.user, "user"],
  ["State", c => c.state],
  ["Consumers", c => show(c.consumer_count)],
  ["Prefetch", c => show(c.prefetch_count)],
  ["Unacked", c => show(c.messages_unacknowledged)],
], "name");

function bindingsTable(id, bindings) {
  return table(id, [
    ["From", b => b.source || "(AMQP default)"],
    ["To", b => `${b.destination} (${b.destination_type})`],
    ["Routing key", b => b.routing_key],
    ["Arguments", b => show(b.arguments)],
  ], bindings);
}

// A form that publishes to `exchange` with a routing key (fixed for a queue's page).
function publishForm(vhost, exchange, fixedRoutingKey) {
  const form = el("form", {id: "publish-form", class: "stacked", onsubmit: event => {
    event.preventDefault();
    const values = formValues(form);
    let headers = {};
    if (values.headers.trim()) {
      try { headers = JSON.parse(values.headers); }
      catch (error) { tell(`Headers must be a JSON object: ${error.message}`, true); return; }
    }
    const properties = {delivery_mode: Number(values.delivery_mode), headers};
    if (values.content_type) properties.content_type = values.content_type;
    act(async () => {
      const answer = await api("POST", `${exchangePath(vhost, exchange)}/publish`, {
        properties, payload: values.payload, payload_encoding: "string",
        routing_key: fixedRoutingKey ?? values.routing_key});
      if (!answer.routed) throw new Error("Message published, but it was not routed to any queue");
    }, "Message published");
  }},
    el("h2", {}, "Publish message"),
    fixedRoutingKey === undefined
      ? field("Routing key", el("input", {name: "routing_key", id: "publish-routing-key"}))
      : el("p", {class: "muted"}, "Published through the default exchange with this queue's name as routing key."),
    field("Delivery mode", el("select", {name: "delivery_mode"},
      el("option", {value: 1}, "1 - non-persistent"), el("option", {value: 2}, "2 - persistent"))),
    field("Content type", el("input", {name: "content_type", placeholder: "text/plain"})),
    field("Headers (JSON)", el("input", {name: "headers", placeholder: '{"key": "value"}'})),
    field("Payload", el("textarea", {name: "payload", id: "publish-payload", rows: 4})),
    el("button", {type: "submit", id: "publish-submit"}, "Publish message"));
  return form;
}

function getMessagesForm(vhost, name) {
  const results = el("div", {id: "got-messages"});
  const form = el("form", {id: "get-form", class: "stacked", onsubmit: event => {
    event.preventDefault();
    const values = formValues(form);
    act(async () => {
      const messages = await api("POST", `${queuePath(vhost, name)}/get`, {
        count: Number(values.count), ackmode: values.ackmode, encoding: "auto",
        truncate: 50000});
      results.replaceChildren(...(messages.length
        ? messages.map((m, i) => el("div", {class: "message"},
            el("h3", {}, `Message ${i + 1}`),
            definitionList([["Exchange", m.exchange || "(AMQP default)"],
                            ["Routing key", m.routing_key], ["Redelivered", m.redelivered],
                            ["Remaining in queue", m.message_count],
                            ["Properties", m.properties],
                            ["Payload", `${m.payload_bytes} bytes, encoding: ${m.payload_encoding}`]]),
            el("pre", {class: "payload"}, m.payload)))
        : [el("p", {class: "empty"}, "Queue is empty")]));
    });
  }},
    el("h2", {}, "Get messages"),
    field("Ack mode", el("select", {name: "ackmode", id: "get-ackmode"},
      el("option", {value: "ack_requeue_true"}, "Nack message requeue true"),
      el("option", {value: "ack_requeue_false"}, "Automatic ack"),
      el("option", {value: "reject_requeue_true"}, "Reject requeue true"),
      el("option", {value: "reject_requeue_false"}, "Reject requeue false"))),
    field("Messages", el("input", {name: "count", type: "number", min: 1, value: 1})),
    el("button", {type: "submit", id: "get-submit"}, "Get message(s)"));
  return el("div", {}, form, results);
}

async function queuePage(view, vhost, name) {
  const [queue, bindings] = await Promise.all([
    api("GET", queuePath(vhost, name)), api("GET", `${queuePath(vhost, name)}/bindings`)]);
  const purge = el("button", {type: "button", id: "purge", onclick: () => {
    if (!confirm(`Purge every message of queue ${name}?`)) return;
    act(() => api("DELETE", `${queuePath(vhost, name)}/contents`), `Queue ${name} purged`)
      .then(done => done && render());
  }}, "Purge messages");
  const remove = el("button", {type: "button", id: "delete", class: "danger", onclick: () => {
    if (!confirm(`Delete queue ${name}?`)) return;
    act(() => api("DELETE", queuePath(vhost, name)), `Queue ${name} deleted`)
      .then(done => done && navigate("#/queues"));
  }}, "Delete queue");
  view.replaceChildren(
    el("h1", {}, "Queue ", el("span", {id: "queue-name"}, name)),
    el("p", {class: "muted"}, `in virtual host ${vhost}`),
    el("section", {class: "cards"},
       card("Ready", queue.messages_ready, "queue-ready"),
       card("Unacknowledged", queue.messages_unacknowledged, "queue-unacked"),
       card("Total", queue.messages, "queue-total"),
       card("Consumers", queue.consumers, "queue-consumers")),
    definitionList([["Type", queue.type], ["State", queue.state], ["Durable", queue.durable],
                    ["Auto-delete", queue.auto_delete], ["Exclusive", queue.exclusive],
                    ["Arguments", queue.arguments], ["Policy", queue.policy],
                    ["Node", queue.node]]),
    el("h2", {}, "Consumers"),
    table("consumers-table", [
      ["Channel", c => (c.channel_details || {}).name], ["Tag", c => c.consumer_tag],
      ["Ack required", c => show(c.ack_required)], ["Prefetch", c => show(c.prefetch_count)],
      ["Active", c => show(c.active)]], queue.consumer_details || []),
    el("h2", {}, "Bindings"),
    bindingsTable("bindings-table", bindings),
    el("div", {class: "forms"}, getMessagesForm(vhost, name), publishForm(vhost, "", name)),
    el("div", {class: "toolbar"}, purge, remove));
}

async function exchangePage(view, vhost, name) {
  const [exchange, bindings] = await Promise.all([
    api("GET", exchangePath(vhost, name)),
    api("GET", `${exchangePath(vhost, name)}/bindings/source`)]);
  view.replaceChildren(
    el("h1", {}, "Exchange ", el("span", {id: "exchange-name"}, exchange.name || "(AMQP default)")),
    el("p", {class: "muted"}, `in virtual host ${vhost}`),
    definitionList([["Type", exchange.type], ["Durable", exchange.durable],
                    ["Auto-delete", exchange.auto_delete], ["Internal", exchange.internal],
                    ["Arguments", exchange.arguments], ["Policy", exchange.policy]]),
    el("h2", {}, "Bindings from this exchange"),
    bindingsTable("bindings-table", bindings),
    el("div", {class: "forms"}, publishForm(vhost, name)));
}

async function connectionPage(view, name) {
  const [connection, channels] = await Promise.all([
    api("GET", `/api/connections/${segment(name)}`),
    api("GET", `/api/connections/${segment(name)}/channels`)]);
  const reason = el("input", {id: "close-reason", value: "Closed via management plugin"});
  const close = el("form", {id: "close-form", class: "inline", onsubmit: event => {
    event.preventDefault();
    if (!confirm(`Close connection ${name}?`)) return;
    act(() => api("DELETE", `/api/connections/${segment(name)}`, undefined,
                  {"x-reason": reason.value}), `Connection ${name} closed`)
      .then(done => done && navigate("#/connections"));
  }}, field("Reason", reason), el("button", {type: "submit", id: "close", class: "danger"},
                                  "Force close"));
  const properties = connection.client_properties || {};
  view.replaceChildren(
    el("h1", {}, "Connection ", el("span", {id: "connection-name"}, name)),
    definitionList([["Client name", connection.user_provided_name], ["User", connection.user],
                    ["Virtual host", connection.vhost], ["State", connection.state],
                    ["Protocol", connection.protocol],
                    ["Client", `${show(properties.product)} ${show(properties.version)}`],
                    ["Peer", `${connection.peer_host}:${connection.peer_port}`],
                    ["Channel max", connection.channel_max], ["Frame max", connection.frame_max],
                    ["Heartbeat", connection.timeout]]),
    el("h2", {}, "Channels"),
    table("channels-table", [
      ["Channel", c => c.name], ["State", c => c.state],
      ["Consumers", c => show(c.consumer_count)], ["Prefetch", c => show(c.prefetch_count)],
      ["Unacked", c => show(c.messages_unacknowledged)]], channels),
    el("h2", {}, "Close this connection"), close);
}

// ---- admin -----------------------------------------------------------------------

function deleteButton(label, path, what) {
  return el("button", {type: "button", class: "danger small", "data-delete": what,
                       onclick: () => {
    if (!confirm(`Delete ${what}?`)) return;
    act(() => api("DELETE", path), `Deleted ${what}`).then(done => done && render());
  }}, label);
}

function adminForm(id, title, fields, submit) {
  const form = el("form", {id, class: "inline", onsubmit: event => {
    event.preventDefault();
    const values = formValues(form);
    act(() => submit(values), `${title}: done`).then(done => done && render());
  }}, el("strong", {}, title), fields, el("button", {type: "submit"}, title));
  return form;
}

async function adminPage(view) {
  const [users, vhosts, permissions, policies] = await Promise.all(
    ["users", "vhosts", "permissions", "policies"].map(kind => api("GET", `/api/${kind}`)));
  const vhostChoice = () => el("select", {name: "vhost"},
    vhosts.map(v => el("option", {value: v.name}, v.name)));
  view.replaceChildren(
    el("h1", {}, "Admin"),
    el("h2", {}, "Users"),
    table("users-table", [
      ["Name", u => u.name], ["Tags", u => [].concat(u.tags).join(", ")],
      ["", u => deleteButton("Delete", `/api/users/${segment(u.name)}`, `user ${u.name}`)]],
      users),
    adminForm("add-user", "Add user", [
      field("Name", el("input", {name: "name", required: true})),
      field("Password", el("input", {name: "password", type: "password"})),
      field("Tags", el("input", {name: "tags", placeholder: "administrator, monitoring"}))],
      values => api("PUT", `/api/users/${segment(values.name)}`,
                    {password: values.password, tags: values.tags})),
    el("h2", {}, "Virtual hosts"),
    table("vhosts-table", [
      ["Name", v => v.name], ["Ready", v => show(v.messages_ready)],
      ["Unacked", v => show(v.messages_unacknowledged)],
      ["", v => deleteButton("Delete", `/api/vhosts/${segment(v.name)}`, `virtual host ${v.name}`)]],
      vhosts),
    adminForm("add-vhost", "Add virtual host",
      [field("Name", el("input", {name: "name", required: true}))],
      values => api("PUT", `/api/vhosts/${segment(values.name)}`, {})),
    el("h2", {}, "Permissions"),
    table("permissions-table", [
      ["User", p => p.user], ["Virtual host", p => p.vhost], ["Configure", p => p.configure],
      ["Write", p => p.write], ["Read", p => p.read],
      ["", p => deleteButton("Clear", `/api/permissions/${segment(p.vhost)}/${segment(p.user)}`,
                             `permissions of ${p.user} in ${p.vhost}`)]], permissions),
    adminForm("set-permission", "Set permission", [
      field("User", el("select", {name: "user"}, users.map(u => el("option", {value: u.name}, u.name)))),
      field("Virtual host", vhostChoice()),
      field("Configure", el("input", {name: "configure", value: ".*", size: 6})),
      field("Write", el("input", {name: "write", value: ".*", size: 6})),
      field("Read", el("input", {name: "read", value: ".*", size: 6}))],
      values => api("PUT", `/api/permissions/${segment(values.vhost)}/${segment(values.user)}`,
                    {configure: values.configure, write: values.write, read: values.read})),
    el("h2", {}, "Policies"),
    table("policies-table", [
      ["Virtual host", p => p.vhost], ["Name", p => p.name], ["Pattern", p => p.pattern],
      ["Apply to", p => p["apply-to"]], ["Definition", p => show(p.definition)],
      ["Priority", p => show(p.priority)],
      ["", p => deleteButton("Delete", `/api/policies/${segment(p.vhost)}/${segment(p.name)}`,
                             `policy ${p.name}`)]], policies),
    adminForm("add-policy", "Add policy", [
      field("Virtual host", vhostChoice()),
      field("Name", el("input", {name: "name", required: true})),
      field("Pattern", el("input", {name: "pattern", required: true, size: 10})),
      field("Apply to", el("select", {name: "apply-to"}, ["all", "queues", "exchanges"].map(
        choice => el("option", {value: choice}, choice)))),
      field("Priority", el("input", {name: "priority", type: "number", value: 0, size: 3})),
      field("Definition (JSON)", el("input", {name: "definition", required: true,
                                              placeholder: '{"max-length": 100}'}))],
      values => api("PUT", `/api/policies/${segment(values.vhost)}/${segment(values.name)}`, {
        pattern: values.pattern, "apply-to": values["apply-to"],
        priority: Number(values.priority), definition: parseObject(values.definition)})));
}

function parseObject(text) {
  try { return JSON.parse(text); }
  catch (error) { throw new Error(`The definition must be a JSON object: ${error.message}`); }
}

// ---- routing, refresh and login --------------------------------------------------

// Each route: [pattern, page, refreshes]; pages with forms do not refresh themselves.
const ROUTES = [
  [/^#\/overview$/, overviewPage, true],
  [/^#\/queues$/, queuesPage, true],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, queuePage, false],
  [/^#\/exchanges$/, exchangesPage, true],
  [/^#\/exchanges\/([^/]+)\/([^/]+)$/, exchangePage, false],
  [/^#\/connections$/, connectionsPage, true],
  [/^#\/connections\/([^/]+)$/, connectionPage, false],
  [/^#\/channels$/, channelsPage, true],
  [/^#\/admin$/, adminPage, false],
];

let refreshTimer = null;
let keepNotice = false;   // set when an action moves to another page and reports there

function navigate(hash) {
  keepNotice = true;
  location.hash = hash;
}

let rendering = 0;   // the latest render wins when answers arrive out of order

async function render() {
  clearTimeout(refreshTimer);
  if (!credentials().user) { showLogin(""); return; }
  const hash = location.hash || "#/overview";
  const route = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!route) { location.hash = "#/overview"; return; }
  const [pattern, page, refreshes] = route;
  const parameters = hash.match(pattern).slice(1).map(decodeURIComponent);
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("current", hash.startsWith(`#/${a.dataset.page}`));
  }
  const ticket = ++rendering;
  const view = el("div", {id: "view"});
  try {
    await page(view, ...parameters);
    if (ticket !== rendering) return;
    document.getElementById("page").replaceChildren(view);
    document.body.dataset.page = hash.split("/")[1];
  } catch (failure) {
    if (ticket !== rendering) return;
    if (failure.status === 401) { logOut("Your session was refused: log in again."); return; }
    document.getElementById("page").replaceChildren(
      el("p", {class: "error", id: "page-error"}, failure.message));
  }
  if (refreshes) refreshTimer = setTimeout(render, REFRESH_MS);
}

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("whoami").textContent = "";
  document.getElementById("page").replaceChildren();
  document.getElementById("login-error").textContent = message;
}

function logOut(message) {
  clearTimeout(refreshTimer);
  sessionStorage.removeItem("warren.user");
  sessionStorage.removeItem("warren.password");
  samples.length = 0;
  showLogin(message);
}

async function enter() {
  const me = await api("GET", "/api/whoami");
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  document.getElementById("whoami").textContent = `${me.name} (${[].concat(me.tags).join(", ")})`;
  render();
}

async function logIn(event) {
  event.preventDefault();
  sessionStorage.setItem("warren.user", document.getElementById("login-user").value);
  sessionStorage.setItem("warren.password", document.getElementById("login-password").value);
  try {
    await enter();
  } catch (failure) {
    const reason = failure.status !== 401 ? failure.message
      : failure.reason === "Login failed" ? "Login failed: check the user name and password."
      : `Login refused: ${failure.reason || "no credentials"}. Ask an administrator for a management tag.`;
    logOut(reason);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", logIn);
  document.getElementById("logout").addEventListener("click", () => logOut(""));
  window.addEventListener("hashchange", () => {
    if (!keepNotice) tell("", false);
    keepNotice = false;
    render();
  });
  if (credentials().user) enter().catch(() => logOut("Log in again."));
  else showLogin("");
});
