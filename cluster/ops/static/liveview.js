// waitgraph live view: polls /api/view every second and redraws.
//
// Every id, reason and signature in the document comes from agents. They reach the DOM only as
// text (textContent, createTextNode, setAttribute on fixed attribute names), never as markup; the
// graph's SVG is graphviz's (every label escaped), parsed as XML and stripped of anything active
// before it is adopted. The page's Content-Security-Policy forbids inline scripts as well.
"use strict";

const POLL_MS = 1000;
let lastSvg = null;
let lastOk = 0;
let failures = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) node.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function put(id, ...children) {
  const box = document.getElementById(id);
  box.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

function text(id, value) {
  document.getElementById(id).textContent = value;
}

function short(digest) {
  return digest ? digest.slice(0, 12) : "-";
}

function ago(atMs, nowMs) {
  if (!atMs) return "-";
  const s = Math.max(0, (nowMs - atMs) / 1000);
  if (s < 60) return `${s.toFixed(1)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s ago`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m ago`;
}

function when(atMs, nowMs) {
  return el("span", { title: atMs ? new Date(atMs).toISOString() : "" }, ago(atMs, nowMs));
}

function table(columns, rows, empty) {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, rows),
  );
}

function yesNo(flag) {
  return el("span", { class: flag ? "yes" : "no" }, flag ? "yes" : "no");
}

function members(c) {
  const extra = c.members_total - c.members.length;
  return c.members.join(" \u2192 ") + (extra > 0 ? ` \u2192 \u2026 (${extra} more)` : "");
}

function more(total, shown, what) {
  return total > shown ? el("p", { class: "note" }, `${total - shown} more ${what} not shown`) : null;
}

// -- the graph: graphviz's SVG, adopted as inert XML ---------------------------------------------

function inert(svgText) {
  const parsed = new DOMParser().parseFromString(svgText, "image/svg+xml");
  const svg = parsed.documentElement;
  if (!svg || svg.nodeName !== "svg" || parsed.getElementsByTagName("parsererror").length) return null;
  for (const bad of Array.from(svg.querySelectorAll("script, foreignObject, iframe, object, embed"))) bad.remove();
  for (const node of [svg, ...svg.querySelectorAll("*")]) {
    for (const attr of Array.from(node.attributes)) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name === "href" || name === "xlink:href" || name === "style") {
        node.removeAttribute(attr.name);
      }
    }
  }
  svg.setAttribute("role", "img");
  return document.importNode(svg, true);
}

function drawGraph(g, counts) {
  text(
    "graph-counts",
    `${g.shown.executions} of ${counts.executions} executions, ${g.shown.targets} of ${counts.targets} targets, ` +
      `${g.shown.waits} of ${counts.waits} waits`,
  );
  text("graph-note", g.note || "");
  if (g.svg === null) {
    lastSvg = null;
    put("graph", el("p", { class: "error" }, `The picture cannot be drawn: ${g.error}`));
    return;
  }
  if (g.svg === lastSvg) return; // unchanged: keep the DOM (and any selection) as it is
  const svg = inert(g.svg);
  put("graph", svg || el("p", { class: "error" }, "The picture could not be parsed."));
  lastSvg = g.svg;
}

// -- the panels ------------------------------------------------------------------------------------

function badges(doc) {
  const n = doc.node;
  const list = [];
  const role = n.role === "leader" ? "good" : n.role === "follower" ? "" : "warn";
  list.push(el("span", { class: `badge ${role}` }, `${n.node_id}: ${n.role}${n.term !== null ? `, term ${n.term}` : ""}`));
  list.push(el("span", { class: `badge ${n.has_quorum ? "good" : "bad"}` }, n.has_quorum ? "quorum" : "NO QUORUM"));
  list.push(el("span", { class: `badge ${doc.mode === "auto" ? "good" : "warn"}` }, `mode ${doc.mode}`));
  const adm = doc.admission;
  if (adm.cluster_frozen !== null) {
    list.push(el("span", { class: "badge bad" }, "admission FROZEN"));
  } else if (adm.frozen_runs_total) {
    list.push(el("span", { class: "badge warn" }, `admission open, ${adm.frozen_runs_total} run(s) frozen`));
  } else {
    list.push(el("span", { class: "badge good" }, "admission open"));
  }
  list.push(el("span", { class: "badge" }, `epoch ${doc.epoch}`));
  const nCycles = doc.cycles_total;
  list.push(el("span", { class: `badge ${nCycles ? "bad" : "good"}` }, `${nCycles} cycle(s)`));
  put("badges", list);
}

function cycles(doc) {
  text("cycles-count", `(${doc.cycles_total})`);
  const rows = doc.cycles.map((c) =>
    el(
      "tr",
      { "data-digest": c.digest },
      el("td", {}, el("span", { class: `tag ${c.kind}` }, c.kind)),
      el("td", { class: "mono", title: c.digest }, short(c.digest)),
      el("td", {}, members(c)),
      el(
        "td",
        {},
        c.proposal === null
          ? "not proposed yet"
          : `${c.proposal}${c.votes ? ` (${c.votes} votes)` : ""}${c.decision_ids.length ? `, ${c.decision_ids.join(", ")}` : ""}`,
      ),
    ),
  );
  put(
    "cycles",
    table(["state", "digest", "members", "recovery"], rows, "No cycle: nothing waits only on itself."),
    more(doc.cycles_total, doc.cycles.length, "cycles"),
  );
}

function scoreTable(d) {
  const cols = ["rank", "member", "role", ...d.terms.slice(0, 5)];
  const rows = d.scores.map((s) =>
    el(
      "tr",
      { class: d.victims.includes(s.execution_id) ? "victim" : null },
      el("td", { class: "num" }, s.rank),
      el("td", { class: "mono" }, `${s.execution_id}@g${s.generation}`),
      el("td", {}, s.role),
      el("td", {}, yesNo(s.external_side_effects)),
      el("td", {}, yesNo(s.checkpoint)),
      el("td", { class: "num" }, s.priority),
      el("td", { class: "num" }, s.cost_consumed),
      el("td", {}, yesNo(s.unique_evidence)),
    ),
  );
  return table(cols, rows, "no candidates");
}

function victimStory(d) {
  const who = d.victims.join(", ") || "nobody";
  const why = d.decided_by ? `it ${d.decided_by_text} (decided by ${d.decided_by})` : "it is the only member";
  if (d.kind === "SHADOW") {
    return `Mode ${d.mode}: nothing was cancelled. Had recovery acted, the victim would have been ${who}: ${why}.`;
  }
  if (d.kind === "VICTIM") return `Victim ${who}: ${why}. Epoch ${d.epoch} was committed before anything was released.`;
  if (d.kind === "TIE_BREAK") return `Livelock (${d.reason_code}): tie-break won by ${d.winner_id}; rolled back: ${who}.`;
  return `${d.kind} (${d.reason_code}): nothing was cancelled.`;
}

function victims(doc) {
  const blocks = doc.victims.map((d) =>
    el(
      "div",
      { class: "decision", "data-decision": d.decision_id },
      el(
        "p",
        {},
        el("span", { class: "tag victim" }, d.kind === "SHADOW" ? "victim (shadow)" : "victim"),
        " ",
        el("b", { class: "mono victim-id" }, d.victims.join(", ") || "-"),
        ` \u00b7 ${d.decision_id}, policy ${d.policy_version}, ${d.kind}, mode ${d.mode}`,
      ),
      el("p", {}, victimStory(d)),
      scoreTable(d),
      more(d.scores_total, d.scores.length, "candidates"),
    ),
  );
  put(
    "victims",
    blocks.length
      ? [
          ...blocks,
          el(
            "p",
            { class: "note" },
            "Victim policy order: no external side effects, then a checkpoint, lower priority, less cost, " +
              "no unique evidence, then the lowest id. Rank 1 is the policy's victim.",
          ),
        ]
      : el("p", { class: "empty" }, "No recovery decision retained on this replica."),
  );
}

function recoveries(doc) {
  const rows = doc.recoveries.map((r) =>
    el(
      "tr",
      {},
      el("td", { class: "mono", title: r.digest }, short(r.digest)),
      el("td", {}, members(r)),
      el("td", {}, `${r.approvals.length} of ${r.quorum}`),
      el("td", {}, r.approvals.join(", ") || "-"),
      el("td", {}, r.rejections.join(", ") || "-"),
      el("td", {}, r.waiting_for.join(", ") || "-"),
      el("td", {}, when(r.proposed_at_ms, doc.served_at_ms)),
    ),
  );
  put(
    "recoveries",
    table(
      ["digest", "members", "votes", "approved by", "rejected by", "not voted", "proposed"],
      rows,
      "No open recovery proposal.",
    ),
    more(doc.recoveries_total, doc.recoveries.length, "recovery proposals"),
  );
}

function decisions(doc) {
  text("decisions-count", `(${doc.decisions_total} retained, epoch now ${doc.epoch})`);
  const rows = doc.decisions.map((d) =>
    el(
      "tr",
      {},
      el("td", { class: "mono" }, d.decision_id),
      el("td", {}, when(d.at_ms, doc.served_at_ms)),
      el("td", {}, d.kind),
      el("td", {}, d.mode),
      el("td", {}, d.epoch === null ? "not advanced" : `\u2192 ${d.epoch}`),
      el("td", { class: "mono" }, d.victims.join(", ") || "-"),
      el("td", {}, d.released.map((r) => r.target_id).join(", ") || "-"),
      el("td", { class: "mono", title: d.signature }, short(d.signature)),
    ),
  );
  put(
    "decisions",
    table(["decision", "at", "kind", "mode", "epoch", "victim", "released", "signature"], rows, "No decision yet."),
    more(doc.decisions_total, doc.decisions.length, "decisions"),
  );
}

function cancellations(doc) {
  text("cancellations-count", `(${doc.cancellations_total})`);
  const rows = doc.cancellations.map((c) =>
    el(
      "tr",
      {},
      el("td", { class: "mono" }, c.run_id),
      el("td", {}, `${c.cause}: ${c.reason}`),
      el("td", { class: "num" }, c.cancel_generation),
      el("td", {}, when(c.requested_at_ms, doc.served_at_ms)),
      el(
        "td",
        {},
        c.pending
          .map((p) => `${p.execution_id}@g${p.generation} ${p.status}${p.quarantined_at_ms && p.status !== "QUARANTINED" ? " (quarantined)" : ""}, asked ${p.emissions}x`)
          .join("; ") || "-",
      ),
    ),
  );
  put(
    "cancellations",
    table(["run", "cause", "cancel gen", "requested", "waiting for"], rows, "Every cancellation has converged."),
    more(doc.cancellations_total, doc.cancellations.length, "cancellations"),
  );
}

function quarantined(doc) {
  text("quarantined-count", `(${doc.quarantined_total})`);
  const rows = doc.quarantined.map((q) =>
    el(
      "tr",
      {},
      el("td", { class: "mono" }, `${q.execution_id}@g${q.generation}`),
      el("td", { class: "mono" }, q.run_id),
      el("td", {}, q.holds.join(", ") || "-"),
      el("td", {}, when(q.since_ms, doc.served_at_ms)),
    ),
  );
  put(
    "quarantined",
    table(["execution", "run", "isolated resources", "since"], rows, "Nothing is quarantined."),
    more(doc.quarantined_total, doc.quarantined.length, "quarantined executions"),
  );
}

function rollout(doc) {
  const adm = doc.admission;
  const rec = doc.recovery;
  const facts = [
    ["rollout mode", doc.mode],
    [
      "admission",
      adm.cluster_frozen !== null ? `FROZEN for the whole cluster: ${adm.cluster_frozen}` : "open to new delegations",
    ],
    ["recovery voters", `${rec.voters.join(", ") || "-"} (quorum ${rec.quorum}, max rollback ${rec.max_rollback})`],
    ["side-effect-free runs", doc.side_effect_free.join(", ") || "-"],
  ];
  const rows = facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)));
  const runs = [
    ...doc.run_modes.map((r) => el("tr", {}, el("td", { class: "mono" }, r.run_id), el("td", {}, `mode ${r.mode}`))),
    ...adm.frozen_runs.map((r) => el("tr", {}, el("td", { class: "mono" }, r.run_id), el("td", {}, `frozen: ${r.reason}`))),
  ];
  put(
    "rollout",
    el("table", {}, el("tbody", {}, rows)),
    runs.length ? el("h2", { class: "count" }, "per-run overrides") : null,
    runs.length ? table(["run", "setting"], runs, "") : null,
  );
}

function render(doc) {
  document.body.dataset.appliedIndex = String(doc.node.applied_index);
  badges(doc);
  const note = document.getElementById("read-note");
  note.textContent = doc.node.read_note;
  note.className = doc.node.has_quorum ? "note" : "note warn";
  drawGraph(doc.graph, doc.counts);
  cycles(doc);
  victims(doc);
  recoveries(doc);
  decisions(doc);
  cancellations(doc);
  quarantined(doc);
  rollout(doc);
  document.body.dataset.loaded = "1";
}

async function poll() {
  try {
    const reply = await fetch("/api/view", { cache: "no-store", credentials: "same-origin" });
    if (reply.status === 401 || reply.status === 403) {
      window.location.assign("/login");
      return;
    }
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    render(await reply.json());
    lastOk = Date.now();
    failures = 0;
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    const r = document.getElementById("refresh");
    r.textContent = `live \u00b7 updated ${new Date(lastOk).toLocaleTimeString()}`;
    r.className = "refresh";
  } catch (err) {
    failures += 1;
    const r = document.getElementById("refresh");
    const since = lastOk ? `; last update ${Math.round((Date.now() - lastOk) / 1000)}s ago` : "";
    r.textContent = `connection lost (${err.message})${since}`;
    r.className = "refresh lost";
  } finally {
    setTimeout(poll, failures ? Math.min(POLL_MS * 2 ** failures, 10000) : POLL_MS);
  }
}

document.addEventListener("DOMContentLoaded", poll);
