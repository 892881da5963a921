// waitgraph live view: a feed of server-sent events (/events) for the panels, the wait graph
// (/api/graph) fetched when its version moves, and a cytoscape.js drawing of the part that matters:
// the cycles and their k-hop neighbourhood, or what the filters select, at most MAX_DRAWN nodes.
// While the toolbar is untouched the page fetches only the cycles' neighbourhood (?part=focus, a few
// KB); the whole graph (MBs at 10,000 executions) once the operator reaches for a filter or search.
//
// Every id, reason and signature comes from agents. They reach the DOM only as text
// (textContent, createTextNode, setAttribute on fixed attribute names), never as markup, and the
// graph draws them on a canvas. The page's Content-Security-Policy forbids inline scripts as well.
"use strict";

const MAX_DRAWN = 300; // nodes drawn at once: beyond this a layout stops being readable
const GRAPH_MIN_MS = 1000; // the graph is fetched at most this often (more when it is large)
const RETRY_MAX_MS = 10000;
const FEED_LOG = 10;

const live = {
  lastOk: 0,
  failures: 0,
  source: null,
  doc: null, // the latest view document
  graph: null, // the indexed graph (indexGraph): the whole of it, or its focus (graph.focus set)
  wantWhole: false, // the toolbar was used: fetch the whole graph, not the focus
  afterWhole: null, // what to do once the whole graph is here (a search asked before it was)
  graphVersion: null,
  fetching: false,
  graphTimer: null, // at most one pending graph fetch
  timing: null, // the last graph fetch's phases (ms since navigation): for the benchmark
  firstTiming: null, // the first graph fetch's (the cold page's, in the benchmark)
  freshTiming: null, // the fetch that first drew a state as new as the node's when the page opened
  feedLog: [], // the first FEED_LOG feed messages: [ms since navigation, graph version, commit index]
  openedAt: null, // the node's commit index when it served the page (else in the first view document)
  lastGraphAt: 0,
  graphCostMs: 0,
  pinned: new Set(), // ids found by search: drawn with their neighbourhood whatever the filters
  selected: null,
  drawnKey: null,
  fitNext: true,
  cy: null,
};
window.liveview = live; // for the browser tests and a curious operator's console

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
  box.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
}

function text(id, value) {
  document.getElementById(id).textContent = value;
}

function short(digest) {
  return digest ? digest.slice(0, 12) : "-";
}

function duration(ms) {
  const s = Math.max(0, ms / 1000);
  if (s < 60) return `${s.toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function ago(atMs, nowMs) {
  return atMs ? `${duration(nowMs - atMs)} ago` : "-";
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

// An id the operator can click to see it in the graph and its details.
function idLink(id, label) {
  const b = el("button", { type: "button", class: "link mono", "data-id": id }, label || id);
  b.addEventListener("click", () => focusOn(id));
  return b;
}

// -- the summary strip --------------------------------------------------------------------------

function stat(label, value, cls) {
  return el("div", { class: `stat ${cls || ""}` }, el("b", {}, String(value)), " ", label);
}

function summary(doc) {
  const s = doc.summary;
  const statuses = Object.entries(s.executions_by_status).map(([k, n]) =>
    stat(k, n, k === "WAITING" ? "warn" : k === "QUARANTINED" || k === "NEEDS_RECONCILIATION" ? "bad" : ""),
  );
  const kinds = Object.entries(s.waits_by_kind).map(([k, n]) => stat(k, n));
  const reasons = s.waits_by_reason.map((r) => el("li", {}, el("b", {}, String(r.count)), " ", r.reason));
  const longest = s.longest_waits.map((w) =>
    el(
      "tr",
      {},
      el("td", { class: "num" }, duration(w.age_ms)),
      el("td", {}, idLink(w.waiter_id)),
      el("td", {}, "\u2192 ", idLink(w.target_id)),
      el("td", { class: "reason" }, w.reason),
    ),
  );
  const c = s.cycles;
  const orphans = s.orphaned.map((id) => idLink(id));
  put(
    "summary",
    el("div", { class: "card tile", id: "sum-status" }, el("h3", {}, `Executions (${doc.counts.executions})`), statuses.length ? statuses : el("p", { class: "empty" }, "none")),
    el(
      "div",
      { class: "card tile", id: "sum-waits" },
      el("h3", {}, `Open waits (${doc.counts.waits})`),
      kinds.length ? kinds : el("p", { class: "empty" }, "none"),
      reasons.length ? el("ul", { class: "reasons" }, reasons) : null,
      s.reasons_total > s.waits_by_reason.length ? el("p", { class: "note" }, `${s.reasons_total - s.waits_by_reason.length} more reasons`) : null,
    ),
    el(
      "div",
      { class: "card tile wide", id: "sum-longest" },
      el("h3", {}, "Longest waits"),
      table(["age", "waiter", "on", "reason"], longest, "Nothing waits."),
    ),
    el(
      "div",
      { class: "card tile", id: "sum-trouble" },
      el("h3", {}, "Trouble"),
      stat("confirmed cycles", c.confirmed, c.confirmed ? "bad" : "good"),
      stat("candidate cycles", c.candidate, c.candidate ? "warn" : "good"),
      stat("cancellations not converged", s.unconverged_cancellations, s.unconverged_cancellations ? "warn" : "good"),
      stat("quarantined", s.quarantined, s.quarantined ? "bad" : "good"),
      stat("orphaned (owner's session gone)", s.orphaned_total, s.orphaned_total ? "warn" : "good"),
      orphans.length ? el("p", { class: "orphans" }, orphans) : null,
    ),
  );
}

// -- the graph: the whole of it, indexed ----------------------------------------------------------

function indexGraph(doc, version, part) {
  const execs = new Map();
  const targets = new Map();
  const adj = new Map(); // id -> Set of neighbour ids (either direction)
  const edges = []; // {id, source, target, kind, label}
  const link = (a, b) => {
    if (!adj.has(a)) adj.set(a, new Set());
    if (!adj.has(b)) adj.set(b, new Set());
    adj.get(a).add(b);
    adj.get(b).add(a);
  };
  for (const [id, generation, status, run, agent] of doc.executions) {
    execs.set(id, { id, generation, status, run: doc.runs[run], agent: doc.agents[agent] });
  }
  for (const [id, kind, version_, satisfier, holders] of doc.targets) {
    targets.set(id, { id, kind, version: version_, satisfier, holders });
    for (const h of holders) {
      if (execs.has(h)) {
        edges.push({ id: `${id}|held|${h}`, source: id, target: h, kind: "held", label: "held by" });
        link(id, h);
      }
    }
    if (satisfier && execs.has(satisfier) && !holders.includes(satisfier)) {
      edges.push({ id: `${id}|sat|${satisfier}`, source: id, target: satisfier, kind: "sat", label: "produced by" });
      link(id, satisfier);
    }
  }
  for (const [waiter, target, reason, edgeVersion] of doc.waits) {
    if (!execs.has(waiter)) continue;
    if (!execs.has(target) && !targets.has(target)) {
      targets.set(target, { id: target, kind: target.split(":")[0], version: null, satisfier: null, holders: [] });
    }
    edges.push({ id: `${waiter}>${target}`, source: waiter, target, kind: "wait", label: `v${edgeVersion}`, reason: doc.reasons[reason] });
    link(waiter, target);
  }
  const cycleOf = new Map(); // execution id -> "confirmed" | "candidate"
  for (const c of doc.cycles) {
    for (const m of c.members) if (cycleOf.get(m) !== "confirmed") cycleOf.set(m, c.kind);
  }
  const kinds = [...new Set([...doc.kinds, ...[...targets.values()].map((t) => t.kind)])].sort();
  // a focus (liveview.focus on the node): every node within focus.hops of the cycles, the whole
  // graph's counts, and the executions that produce a kept target without being kept
  const focus = part === "focus" && doc.focus ? doc.focus : null;
  const outside = new Set(doc.outside || []);
  return { version, focus, outside, execs, targets, adj, edges, cycleOf, victims: doc.victims, cycles: doc.cycles, runs: doc.runs, agents: doc.agents, statuses: doc.statuses, kinds };
}

// Whether graph g has everything filters f draw: the whole graph does; a focus, the default view
// (cycles, no filter, nothing found) up to its hops (selectNodes then takes the same steps over it).
function covers(g, f) {
  if (!g.focus) return true;
  return f.cycles && !f.run && !f.agent && !f.status && !f.kind && !live.pinned.size && f.hops <= g.focus.hops;
}

// The toolbar is in use: from now on fetch the whole graph (at once, whatever its version), then `then`.
function wantWhole(then) {
  live.wantWhole = true;
  if (then) live.afterWhole = then;
  if (live.graph && !live.graph.focus) {
    live.afterWhole = null;
    if (then) then();
    return;
  }
  maybeFetchGraph();
}

function filters() {
  return {
    cycles: document.getElementById("f-cycles").checked,
    hops: Math.max(0, Math.min(6, Number(document.getElementById("f-hops").value) || 0)),
    run: document.getElementById("f-run").value.trim(),
    agent: document.getElementById("f-agent").value.trim(),
    status: document.getElementById("f-status").value,
    kind: document.getElementById("f-kind").value,
  };
}

// What to draw: seeds (cycle members, else every match; plus what search pinned), then a
// breadth-first walk through whatever passes the filters, k execution hops out (a target on the
// way costs no hop), until MAX_DRAWN nodes.
function selectNodes(g, f) {
  const execOk = (x) => (!f.run || x.run === f.run) && (!f.agent || x.agent === f.agent) && (!f.status || x.status === f.status);
  const passes = (id) => {
    const x = g.execs.get(id);
    if (x) return execOk(x);
    const t = g.targets.get(id);
    return !!t && (!f.kind || t.kind === f.kind);
  };
  const narrowed = !!(f.run || f.agent || f.status);
  let seeds = [];
  let note = "";
  if (f.cycles) {
    const order = [...Object.keys(g.victims), ...g.cycles.flatMap((c) => c.members)];
    seeds = [...new Set(order)].filter((id) => g.execs.has(id) && passes(id));
    if (!seeds.length && narrowed) note = "No cycle member matches the filters: showing every match.";
    else if (!seeds.length && !g.cycles.length) note = "No cycle: showing what waits.";
  }
  if (!seeds.length && (!f.cycles || note)) {
    for (const x of g.execs.values()) if (execOk(x) && (narrowed || g.adj.has(x.id))) seeds.push(x.id);
    if (f.kind && !narrowed) {
      seeds = [];
      for (const t of g.targets.values()) if (t.kind === f.kind) seeds.push(t.id);
    }
  }
  const pinned = [...live.pinned].filter((id) => g.execs.has(id) || g.targets.has(id));
  const dist = new Map();
  const queue = [];
  for (const id of [...pinned, ...seeds]) {
    if (!dist.has(id)) {
      dist.set(id, 0);
      queue.push(id);
    }
  }
  let capped = dist.size > MAX_DRAWN;
  // 0-1 breadth-first: a deque keeps nodes in order of hops
  const deque = queue.slice(0, MAX_DRAWN);
  const kept = new Set(deque);
  let head = 0;
  while (head < deque.length) {
    const id = deque[head++];
    const d = dist.get(id);
    for (const n of g.adj.get(id) || []) {
      if (kept.has(n) || (!passes(n) && !live.pinned.has(n))) continue;
      const nd = d + (g.execs.has(n) ? 1 : 0);
      if (nd > f.hops) continue;
      if (kept.size >= MAX_DRAWN) {
        capped = true;
        break;
      }
      dist.set(n, nd);
      kept.add(n);
      if (nd === d) deque.splice(head, 0, n); // a target: same hop, next in line
      else deque.push(n);
    }
  }
  if (capped) note = `${note} Drawing the first ${MAX_DRAWN} nodes: narrow with a filter or fewer hops.`.trim();
  return { ids: kept, note };
}

// A node's box fits its label (monospace: about 0.62 em a character); cytoscape's "label" size is deprecated.
function sized(data, padding) {
  const lines = data.label.split("\n");
  data.w = Math.max(...lines.map((l) => l.length)) * 6.9 + 2 * padding;
  data.h = lines.length * 13.5 + padding + 6;
  return data;
}

function elementsFor(g, ids) {
  const inCycle = (id) => g.cycleOf.has(id);
  const nodes = [];
  for (const id of ids) {
    const x = g.execs.get(id);
    if (x) {
      const victim = g.victims[id];
      const cls = ["exec", `s-${x.status}`, g.cycleOf.get(id) || "", victim ? "victim" : ""].filter(Boolean);
      const label = `${id}\n${x.status}${victim ? `\nVICTIM (${victim})` : ""}`;
      nodes.push({ group: "nodes", data: sized({ id, label }, 8), classes: cls.join(" ") });
    } else {
      const t = g.targets.get(id);
      const known = g.execs.has(t.satisfier) || g.outside.has(t.satisfier);
      const label = t.satisfier && !known ? `${id}\n(${t.satisfier})` : id;
      nodes.push({ group: "nodes", data: sized({ id, label }, 14), classes: `target k-${t.kind}` });
    }
  }
  const edges = [];
  for (const e of g.edges) {
    if (!ids.has(e.source) || !ids.has(e.target)) continue;
    // an edge inside a cycle: between members, or a member's wait on a target a member holds or produces
    const ends = [e.source, e.target];
    const hot = ends.every((n) => inCycle(n) || (g.targets.has(n) && [...(g.adj.get(n) || [])].filter(inCycle).length >= 2));
    const kind = hot ? (ends.some((n) => g.cycleOf.get(n) === "confirmed") ? "confirmed" : "candidate") : "";
    edges.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target, label: e.label }, classes: `${e.kind} ${kind}`.trim() });
  }
  return [...nodes, ...edges];
}

const STYLE = [
  {
    selector: "node",
    style: {
      label: "data(label)",
      "text-wrap": "wrap",
      "text-valign": "center",
      "font-size": 11,
      "font-family": "DejaVu Sans Mono, Menlo, monospace",
      color: "#1f2933",
      width: "data(w)",
      height: "data(h)",
      "background-color": "#ffffff",
      "border-width": 1,
      "border-color": "#6b7280",
    },
  },
  { selector: "node.exec", style: { shape: "round-rectangle" } },
  { selector: "node.target", style: { shape: "ellipse", "background-color": "#eef2ff" } },
  { selector: "node.s-WAITING", style: { "background-color": "#fffbeb" } },
  { selector: "node.s-QUARANTINED, node.s-NEEDS_RECONCILIATION", style: { "background-color": "#fee2e2" } },
  { selector: "node.s-COMPLETED, node.s-CANCELLED, node.s-FAILED", style: { color: "#9aa5b1", "border-color": "#cbd2d9" } },
  { selector: "node.candidate", style: { "border-width": 3, "border-color": "#d97706" } },
  { selector: "node.confirmed", style: { "border-width": 3, "border-color": "#dc2626" } },
  { selector: "node.victim", style: { "background-color": "#ffe4e1", "border-style": "double", "border-width": 7, "border-color": "#dc2626", "font-weight": "bold" } },
  { selector: "node:selected", style: { "overlay-color": "#1d4ed8", "overlay-opacity": 0.18, "overlay-padding": 6 } },
  {
    selector: "edge",
    style: {
      width: 1.4,
      "curve-style": "bezier",
      "line-color": "#4b5563",
      "target-arrow-color": "#4b5563",
      "target-arrow-shape": "triangle",
      "arrow-scale": 0.9,
      label: "data(label)",
      "font-size": 9,
      color: "#616e7c",
      "text-background-color": "#ffffff",
      "text-background-opacity": 0.8,
    },
  },
  { selector: "edge.held, edge.sat", style: { "line-style": "dashed", "line-color": "#9aa5b1", "target-arrow-color": "#9aa5b1" } },
  { selector: "edge.candidate", style: { width: 3, "line-color": "#d97706", "target-arrow-color": "#d97706" } },
  { selector: "edge.confirmed", style: { width: 3, "line-color": "#dc2626", "target-arrow-color": "#dc2626" } },
];

// A force-directed layout draws a small ring as a ring; past COSE_MAX elements it gets slow and
// tangled, and dagre's layers (left to right, along the waits) read better and lay out faster.
const COSE_MAX = 100;
const FIT_ALL_MAX = 60;

function layoutFor(elements) {
  if (elements <= COSE_MAX) {
    // strong repulsion, weak gravity, long springs: a ring opens into a circle, tails stay short
    return { name: "cose", randomize: true, numIter: 2500, nodeRepulsion: () => 200000, idealEdgeLength: () => 60, edgeElasticity: () => 100, gravity: 0.25, nodeOverlap: 20 };
  }
  return { name: "dagre", rankDir: "LR", nodeSep: 18, rankSep: 55, edgeSep: 8 };
}

function ensureCy() {
  if (live.cy) return live.cy;
  if (typeof cytoscape !== "function") throw new Error("the graph library did not load");
  if (typeof cytoscapeDagre === "function") cytoscape.use(cytoscapeDagre);
  live.cy = cytoscape({
    container: document.getElementById("graph"),
    style: STYLE,
    minZoom: 0.05,
    maxZoom: 4,
    boxSelectionEnabled: false,
  });
  live.cy.on("tap", "node", (ev) => select(ev.target.id()));
  return live.cy;
}

function drawGraph() {
  const g = live.graph;
  if (!g) return;
  const f = filters();
  if (!covers(g, f)) {
    text("graph-note", "Fetching the whole graph for the filters…");
    wantWhole();
    return;
  }
  const { ids, note } = selectNodes(g, f);
  const els = elementsFor(g, ids);
  const cy = ensureCy();
  const key = els.map((e) => `${e.data.id}:${e.classes}:${e.data.label}`).join("|");
  if (key !== live.drawnKey) {
    const same = els.length === cy.elements().length && els.every((e) => cy.getElementById(e.data.id).length);
    cy.batch(() => {
      if (same) {
        for (const e of els) {
          const ele = cy.getElementById(e.data.id);
          ele.data("label", e.data.label);
          ele.classes(e.classes);
        }
      } else {
        cy.elements().remove();
        cy.add(els);
      }
    });
    if (!same) {
      cy.layout({ ...layoutFor(els.length), fit: false, animate: false }).run();
      live.fitNext = live.fitNext || cy.zoom() === 1;
    }
    live.drawnKey = key;
  }
  if (live.fitNext) {
    fit();
    live.fitNext = false;
  }
  if (live.selected && cy.getElementById(live.selected).length) cy.getElementById(live.selected).select();
  const execs = [...ids].filter((id) => g.execs.has(id)).length;
  const total = g.focus || { executions: g.execs.size, targets: g.targets.size };
  text(
    "graph-counts",
    `${execs} of ${total.executions} executions, ${ids.size - execs} of ${total.targets} targets drawn, at applied index ${g.version}`,
  );
  text("graph-note", note);
  const box = document.getElementById("graph");
  box.dataset.drawn = String(ids.size);
  box.dataset.version = String(g.version);
  // for the tests and the benchmark: the first drawing, and the first of what the feed says is current
  const now = String(Math.round(performance.now()));
  if (!document.body.dataset.firstRenderMs && ids.size) document.body.dataset.firstRenderMs = now;
  if (!document.body.dataset.currentRenderMs && ids.size && live.doc && live.doc.graph_version <= g.version) {
    document.body.dataset.currentRenderMs = now;
  }
  // and the first drawing of a state at least as new as the node's when the page opened, with the
  // panels (the summary, the cycles: the feed's document) as new too: the graph can be fetched new
  // while the feed's first document is the build the node kept ready before (render() calls again)
  if (!document.body.dataset.freshRenderMs && ids.size && live.openedAt !== null && live.openedAt <= g.version &&
    live.doc && live.openedAt <= live.doc.graph_version) {
    document.body.dataset.freshRenderMs = now;
  }
}

// Fit the cycles (or everything drawn) into the panel.
function fit() {
  const cy = live.cy;
  if (!cy || !cy.elements().length) return;
  const hot = cy.nodes(".confirmed, .candidate, .victim");
  const pinned = cy.nodes().filter((n) => live.pinned.has(n.id()));
  // a small drawing fits whole; a large one fits the cycles (or what was found) and their neighbours
  const small = cy.nodes().length <= FIT_ALL_MAX;
  const focus = pinned.length ? pinned.closedNeighborhood() : hot.length && !small ? hot.closedNeighborhood() : cy.elements();
  cy.fit(focus, 30);
  if (cy.zoom() > 1.5) {
    cy.zoom(1.5);
    cy.center(focus);
  }
}

async function fetchGraph() {
  live.fetching = true;
  const early = window.liveviewFirstGraph; // prefetch.js: asked for before the scripts loaded
  window.liveviewFirstGraph = null;
  const t0 = early ? early.askedAt : performance.now();
  try {
    const url = early || !live.wantWhole ? "/api/graph?part=focus" : "/api/graph";
    const reply = await (early ? early.reply : fetch(url, { cache: "no-store", credentials: "same-origin" }));
    if (reply.status === 401 || reply.status === 403) return window.location.assign("/login");
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    const t1 = performance.now();
    const doc = await reply.json();
    const t2 = performance.now();
    const got = Number(reply.headers.get("X-Graph-Version"));
    const part = reply.headers.get("X-Graph-Part") || "whole";
    live.graph = indexGraph(doc, got, part);
    live.graphVersion = got;
    const t3 = performance.now();
    fillChoices(live.graph);
    const t4 = performance.now();
    drawGraph();
    live.timing = { part, start: Math.round(t0), reply: Math.round(t1), parsed: Math.round(t2), indexed: Math.round(t3), choices: Math.round(t4), drawn: Math.round(performance.now()) };
    live.firstTiming = live.firstTiming || live.timing;
    if (!live.freshTiming && document.body.dataset.freshRenderMs) live.freshTiming = { ...live.timing, version: got, openedAt: live.openedAt };
    if (live.selected) showDetails(live.selected);
    if (!live.graph.focus && live.afterWhole) {
      const then = live.afterWhole;
      live.afterWhole = null;
      then();
    }
  } finally {
    live.fetching = false;
    live.lastGraphAt = Date.now();
    live.graphCostMs = performance.now() - t0;
  }
  maybeFetchGraph(); // the feed may have moved on meanwhile
}

function maybeFetchGraph() {
  const doc = live.doc;
  const upgrade = live.wantWhole && live.graph && live.graph.focus; // the toolbar needs the whole graph: now
  if (live.fetching || (!upgrade && (!doc || doc.graph_version === live.graphVersion))) return;
  // a large graph costs the browser (and the node) more: refresh it less often, once the page
  // has drawn a build its feed called current and a state as new as the node's when the page
  // opened (until then, at once: that is the first render)
  const wait = !upgrade && document.body.dataset.currentRenderMs && document.body.dataset.freshRenderMs
    ? Math.max(GRAPH_MIN_MS, 4 * live.graphCostMs) - (Date.now() - live.lastGraphAt)
    : 0;
  if (wait > 0) {
    if (!live.graphTimer) {
      live.graphTimer = setTimeout(() => {
        live.graphTimer = null;
        maybeFetchGraph();
      }, wait);
    }
    return;
  }
  fetchGraph().catch((err) => lost(err));
}

function fillChoices(g) {
  const options = (id, values) => {
    const box = document.getElementById(id);
    if (box.dataset.count === String(values.length)) return;
    box.replaceChildren(...values.map((v) => el("option", { value: v })));
    box.dataset.count = String(values.length);
  };
  options("runs", [...g.runs].sort());
  options("agents", [...g.agents].sort());
  const select = (id, values) => {
    const box = document.getElementById(id);
    const have = new Set([...box.options].map((o) => o.value));
    for (const v of values) if (!have.has(v)) box.appendChild(el("option", { value: v }, v));
  };
  select("f-status", g.statuses);
  select("f-kind", g.kinds);
}

// -- find and click -----------------------------------------------------------------------------

function findId(query) {
  const g = live.graph;
  if (!g || !query) return null;
  if (g.execs.has(query) || g.targets.has(query)) return query;
  if (g.execs.has(`exec:${query}`)) return `exec:${query}`;
  for (const m of [g.execs, g.targets]) for (const id of m.keys()) if (id.includes(query)) return id;
  return null;
}

function suggest() {
  const g = live.graph;
  const q = document.getElementById("f-search").value.trim();
  if (!g || q.length < 2) return;
  if (g.focus) return wantWhole(suggest);
  const found = [];
  for (const m of [g.execs, g.targets]) {
    for (const id of m.keys()) {
      if (id.includes(q)) found.push(id);
      if (found.length >= 12) break;
    }
  }
  document.getElementById("found").replaceChildren(...found.map((v) => el("option", { value: v })));
}

function focusOn(id) {
  if (!live.graph) return;
  live.pinned.add(id);
  live.fitNext = true;
  drawGraph();
  select(id);
}

function select(id) {
  live.selected = id;
  const cy = live.cy;
  if (cy) {
    cy.nodes().unselect();
    const n = cy.getElementById(id);
    if (n.length) n.select();
  }
  showDetails(id);
}

async function showDetails(id) {
  const reply = await fetch(`/api/details?id=${encodeURIComponent(id)}`, { cache: "no-store", credentials: "same-origin" });
  if (live.selected !== id) return;
  if (reply.status === 404) {
    put("details", el("p", { class: "empty" }, `${id} is no longer on this replica.`));
    return;
  }
  if (!reply.ok) return;
  const d = await reply.json();
  if (live.selected !== id) return;
  put("details", d.kind === "execution" ? execDetails(d) : targetDetails(d));
  document.getElementById("details").dataset.id = id;
}

function facts(rows) {
  return el("table", { class: "facts" }, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))));
}

// A wait's place in its target's grant queue (resources and pools): 0 is granted next.
function place(w) {
  return w.queue_position === null || w.queue_position === undefined ? "-" : String(w.queue_position + 1);
}

function waitedOnBy(d, now) {
  return table(
    ["waiter", "reason", "edge v", "queue", "since"],
    d.waited_on_by.map((w) => el("tr", {}, el("td", {}, idLink(w.waiter_id), `@g${w.waiter_generation}`), el("td", { class: "reason" }, w.reason), el("td", { class: "num" }, w.edge_version), el("td", { class: "num" }, place(w)), el("td", {}, when(w.registered_at_ms, now)))),
    "Nobody waits on it.",
  );
}

function decisionsOf(d) {
  if (!d.decisions.length) return el("p", { class: "empty" }, "In no retained decision.");
  return d.decisions.map((x) =>
    el("div", { class: "decision" }, el("p", {}, el("b", {}, x.decision_id), ` ${x.kind}, mode ${x.mode}: `, victimStory(x)), scoreTable(x)),
  );
}

function execDetails(d) {
  const now = live.doc ? live.doc.now_ms : 0;
  const g = live.graph;
  const cycle = g && g.cycleOf.get(d.id);
  return [
    el("h3", { class: "mono" }, d.id, cycle ? el("span", { class: `tag ${cycle}` }, ` ${cycle} cycle`) : null, g && g.victims[d.id] ? el("span", { class: "tag victim" }, "victim") : null),
    facts([
      ["generation", d.generation],
      ["status", `${d.status} (${ago(d.status_at_ms, now)})`],
      ["run", d.run_id],
      ["agent", `${d.agent_id} (session ${d.session})`],
      ["parent", d.parent_id || "-"],
      ["priority", d.priority],
      ["checkpoint", yesNo(d.checkpoint)],
      ["unique evidence", yesNo(d.unique_evidence)],
      ["cost consumed", d.cost_consumed],
    ]),
    el("h4", {}, "Decisions and scores"),
    decisionsOf(d),
    el("h4", {}, `Waits (${d.waits.length})`),
    table(
      ["on", "reason", "edge v", "target gen", "queue", "since"],
      d.waits.map((w) => el("tr", {}, el("td", {}, idLink(w.target_id)), el("td", { class: "reason" }, w.reason), el("td", { class: "num" }, w.edge_version), el("td", { class: "num" }, w.target_generation), el("td", { class: "num" }, place(w)), el("td", {}, when(w.registered_at_ms, now)))),
      "It waits on nothing.",
    ),
    el("h4", {}, "Holds / produces"),
    d.holds.length || d.satisfies.length
      ? el("p", {}, ...d.holds.map((t) => [idLink(t), " (holds) "]), ...d.satisfies.map((t) => [idLink(t), " (produces) "]))
      : el("p", { class: "empty" }, "Nothing."),
    el("h4", {}, `Waited on by (${d.waited_on_by.length})`),
    waitedOnBy(d, now),
    el("h4", {}, `Side effects (${d.side_effects.length})`),
    table(
      ["effect", "outcome", "compensatable", "gen"],
      d.side_effects.map((s) => el("tr", {}, el("td", { class: "mono" }, s.effect_id), el("td", {}, s.outcome), el("td", {}, yesNo(s.compensatable)), el("td", { class: "num" }, s.generation))),
      "None recorded.",
    ),
  ];
}

function targetDetails(d) {
  const now = live.doc ? live.doc.now_ms : 0;
  return [
    el("h3", { class: "mono" }, d.id),
    facts([
      ["kind", d.target_kind],
      ["version", d.version],
      ["slots", d.slots],
      ["satisfier", d.satisfier_id ? (d.satisfier_id.startsWith("exec:") ? [idLink(d.satisfier_id), ` @g${d.satisfier_generation}`] : d.satisfier_id) : "-"],
      ["approved", d.approved === null ? "-" : yesNo(d.approved)],
      ["holders", d.holders.length ? d.holders.map((h) => [idLink(h.execution_id), `@g${h.generation} `]) : "-"],
    ]),
    el("h4", {}, `Waited on by (${d.waited_on_by.length})`),
    waitedOnBy(d, now),
    el("h4", {}, "Decisions that released it"),
    decisionsOf(d),
  ];
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
  if (d.kind === "REASSIGN") {
    const moves = (d.reassigned || []).map((r) => `${r.approval_id} from ${r.from_id} to ${r.to_id}`).join("; ");
    return `Reassigned ${moves || "an approval"}: nobody was cancelled. Epoch ${d.epoch} was committed first.`;
  }
  return `${d.kind} (${d.reason_code}): nothing was cancelled.`;
}

// What recovery considered, in its order (prevent, reorder, reassign, victim), and what each did.
function remedies(d) {
  if (!d.remedies || !d.remedies.length) return null;
  const parts = d.remedies.map((r) => `${r.remedy} ${r.outcome}${r.reason ? ` (${r.reason})` : ""}`);
  return el("p", { class: "note remedies" }, `Remedies, in order: ${parts.join(" \u2192 ")}.`);
}

function victims(doc) {
  const blocks = doc.victims.map((d) =>
    el(
      "div",
      { class: "decision", "data-decision": d.decision_id },
      el(
        "p",
        {},
        d.kind === "REASSIGN"
          ? el("span", { class: "tag reassigned" }, "reassigned")
          : el("span", { class: "tag victim" }, d.kind === "SHADOW" ? "victim (shadow)" : "victim"),
        " ",
        el("b", { class: "mono victim-id" }, d.victims.join(", ") || "-"),
        ` \u00b7 ${d.decision_id}, policy ${d.policy_version}, ${d.kind}, mode ${d.mode}`,
      ),
      el("p", {}, victimStory(d)),
      remedies(d),
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

function sessions(doc) {
  const ss = doc.sessions;
  if (!ss) {
    text("sessions-count", "");
    put("sessions", el("p", { class: "empty" }, "This node has no view of the sessions right now."));
    return;
  }
  text("sessions-count", `(${ss.active})`);
  const secs = (s) => `${s}s`;
  const facts = [
    ["active", `${ss.active} (limits: ${ss.max_per_node} per node, ${ss.max_per_cluster} in the cluster)`],
    ["heartbeating through this node", String(ss.here)],
    [
      "time since the last heartbeat",
      ss.heartbeat_ages ? `p99 ${secs(ss.heartbeat_age_p99_s)}, oldest ${secs(ss.oldest_heartbeat_age_s)}, over ${ss.heartbeat_ages} sessions` : "-",
    ],
    ["joins refused (too_many_sessions)", Object.entries(ss.refused).map(([k, n]) => `${n} by ${k}`).join(", ")],
  ];
  const rows = ss.suspended.map((s) =>
    el("tr", {}, el("td", { class: "mono" }, s.agent_id), el("td", {}, `${secs(s.heartbeat_age_s)} ago`)),
  );
  put(
    "sessions",
    el("table", {}, el("tbody", {}, facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))),
    ss.leading
      ? [
          el("h2", { class: "count", id: "suspended-count" }, `suspended: ${ss.suspended_count} (silent for over half their lease)`),
          table(["agent", "last heard"], rows, "No session is suspended."),
          more(ss.suspended_count, ss.suspended.length, "suspended agents"),
        ]
      : el(
          "p",
          { class: "note" },
          "A follower knows only the heartbeats it received: the leader's page names the suspended agents and has every session's age.",
        ),
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
  live.doc = doc;
  if (live.feedLog.length < FEED_LOG) live.feedLog.push([Math.round(performance.now()), doc.graph_version, doc.node.commit_index]);
  if (live.openedAt === null) live.openedAt = doc.node.commit_index ?? doc.node.applied_index;
  document.body.dataset.appliedIndex = String(doc.node.applied_index);
  badges(doc);
  const note = document.getElementById("read-note");
  note.textContent = doc.node.read_note;
  note.className = doc.node.has_quorum ? "note" : "note warn";
  summary(doc);
  cycles(doc);
  victims(doc);
  recoveries(doc);
  decisions(doc);
  cancellations(doc);
  quarantined(doc);
  sessions(doc);
  rollout(doc);
  document.body.dataset.loaded = "1";
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  const g = live.graph;
  const owed = (!document.body.dataset.currentRenderMs && doc.graph_version <= g?.version) ||
    (!document.body.dataset.freshRenderMs && live.openedAt <= g?.version);
  if (g && owed) drawGraph(); // for the marks the benchmark and the tests read
  maybeFetchGraph();
}

// -- the feed -----------------------------------------------------------------------------------

function lost(err) {
  const r = document.getElementById("refresh");
  const since = live.lastOk ? `; last update ${Math.round((Date.now() - live.lastOk) / 1000)}s ago` : "";
  r.textContent = `connection lost (${err.message || err})${since}`;
  r.className = "refresh lost";
}

function onView(message) {
  const doc = JSON.parse(message.data);
  if (doc.error) {
    lost(new Error(doc.message));
    return;
  }
  render(doc);
  live.lastOk = Date.now();
  live.failures = 0;
  const r = document.getElementById("refresh");
  r.textContent = `live \u00b7 updated ${new Date(live.lastOk).toLocaleTimeString()}`;
  r.className = "refresh";
}

// One EventSource at a time. The browser reconnects it by itself after a network error; a refusal
// (401, 403) or a 5xx closes it, and then a probe says which: the login form, or a retry with back-off.
function connect() {
  const source = new EventSource("/events");
  live.source = source;
  source.addEventListener("view", onView);
  source.onerror = async () => {
    lost(new Error("the feed stopped"));
    if (source.readyState !== EventSource.CLOSED) return;
    live.failures += 1;
    try {
      const probe = await fetch("/api/view", { cache: "no-store", credentials: "same-origin" });
      if (probe.status === 401 || probe.status === 403) return window.location.assign("/login");
    } catch (err) {
      lost(err);
    }
    setTimeout(connect, Math.min(1000 * 2 ** live.failures, RETRY_MAX_MS));
  };
}

function wire() {
  const served = document.querySelector('meta[name="waitgraph-commit-index"]');
  if (served && served.content) live.openedAt = Number(served.content);
  const form = document.getElementById("filters");
  const redraw = () => {
    live.fitNext = true;
    drawGraph();
  };
  for (const id of ["f-cycles", "f-hops", "f-status", "f-kind"]) document.getElementById(id).addEventListener("change", redraw);
  for (const id of ["f-run", "f-agent"]) document.getElementById(id).addEventListener("change", redraw);
  document.getElementById("f-search").addEventListener("input", suggest);
  // reaching for a filter or the search box: the whole graph is fetched (once, then kept current)
  form.addEventListener("focusin", (ev) => {
    if (ev.target.id !== "f-fit" && ev.target.id !== "f-reset") wantWhole();
  });
  const find = () => {
    const q = document.getElementById("f-search").value.trim();
    const id = findId(q);
    if (id) focusOn(id);
    else text("graph-note", q ? `Nothing on this replica matches ${JSON.stringify(q)}.` : "");
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (live.graph && live.graph.focus) {
      text("graph-note", "Fetching the whole graph to search it…");
      wantWhole(find);
    } else find();
  });
  document.getElementById("f-fit").addEventListener("click", fit);
  document.getElementById("f-reset").addEventListener("click", () => {
    form.reset();
    live.pinned.clear();
    live.wantWhole = false; // back to the cycles: the focus is enough again, from the next version
    redraw();
  });
  connect();
  // at once, beside the feed's first message: both wait for the same build on the node
  fetchGraph().catch((err) => lost(err));
}

document.addEventListener("DOMContentLoaded", wire);
