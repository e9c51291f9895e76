// kforge ui: the page's script. It reads the JSON that ui/server.py serves and builds the DOM with textContent
// only, never as markup: sources and failure messages may come from an LLM (Note [a local page that other sites
// cannot read] in ui/server.py).
"use strict";

const POLL_MS = 2000;
const state = {
  list: [], key: null, search: null, node: null, nodeId: null, tab: null, now: 0, view: "searches",
  from: "local",  // whose search tree is open: this cache's, or the team store's (?from=team)
};
const kstate = { body: null, tier: null, key: null, record: null, tab: null };

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }

function $(id) { return document.getElementById(id); }

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  const body = await r.json().catch(() => ({ error: `${r.status} ${r.statusText}` }));
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

function status(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

const num = (x, digits) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const us = (x) => (x === null || x === undefined ? "–" : `${num(x, 2)} us`);

function ago(t) {
  if (!t) return "";
  const s = Math.max(0, state.now - t);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return new Date(t * 1000).toISOString().slice(0, 16).replace("T", " ");
}

function facts(dl, pairs) {
  clear(dl);
  for (const [k, v] of pairs) {
    if (v === null || v === undefined || v === "") continue;
    dl.appendChild(el("dt", null, k));
    dl.appendChild(el("dd", null, v));
  }
}

// ---- the list of searches ----------------------------------------------------------------------------------------

async function refreshList() {
  const body = await getJSON("/api/searches");
  state.list = body.searches;
  state.now = body.now;
  $("cache").textContent = body.searches_dir;
  renderList();
  renderQueue(body.queued || []);
  const live = state.list.filter((s) => s.state === "live").length;
  status(`${state.list.length} searches, ${live} live; updated ${new Date().toLocaleTimeString()}`);
}

function listText(s) {
  return [s.op, s.tensors, s.state, s.decision, s.key].join(" ").toLowerCase();
}

function renderList() {
  const ol = clear($("search-list"));
  const q = $("filter").value.trim().toLowerCase();
  $("empty").hidden = state.list.length > 0;
  for (const s of state.list) {
    if (q && !listText(s).includes(q)) continue;
    const li = el("li", s.key === state.key && state.from === "local" ? "selected" : "");
    const head = el("div");
    head.appendChild(el("span", `badge ${s.state}`, s.state));
    if (s.decision) head.appendChild(el("span", `badge ${s.decision}`, s.decision));
    head.appendChild(el("span", "op", s.op || s.key.slice(0, 16)));
    li.appendChild(head);
    li.appendChild(el("div", "sub", s.tensors));
    const best = s.best_speedup
      ? `best ${num(s.best_speedup, 2)}x eager, ${num(s.best_pct_roofline, 0)}% of roofline` : "no kernel yet";
    const its = s.iterations_budget ? `${s.iterations}/${s.iterations_budget}` : `${s.iterations}`;
    const text = s.state === "unreadable" ? s.reason
      : `${its} iterations, ${s.failed} failed; ${best}; ${ago(s.updated_at)}`;
    li.appendChild(el("div", "sub", text));
    li.addEventListener("click", () => selectSearch(s.key));
    ol.appendChild(li);
  }
}

// The misses compiles queued: the searches still to come (kforge prewarm --queued).
function renderQueue(queued) {
  $("queue").hidden = queued.length === 0;
  $("queue-title").textContent = `${queued.length} queued for kforge prewarm --queued`;
  const ol = clear($("queue-list"));
  for (const m of queued) {
    const li = el("li");
    li.appendChild(el("div", "op", m.op));
    const seen = `missed by ${m.processes} process(es), ${ago(m.last_seen)}`;
    li.appendChild(el("div", "sub", `${m.tensors} · ${m.arch} · ${seen}`));
    li.appendChild(el("div", "sub", m.why));
    ol.appendChild(li);
  }
}

// ---- one search and its tree -------------------------------------------------------------------------------------

// The page's address of the open search (and node): KEY[/N], or team/KEY[/N] for a tree of the team store.
function searchHash() {
  const node = state.nodeId === null ? "" : `/${state.nodeId}`;
  return state.key ? `${state.from === "local" ? "" : `${state.from}/`}${state.key}${node}` : "";
}

function fromQuery(extra) {
  const from = state.from === "local" ? "" : `from=${encodeURIComponent(state.from)}`;  // team, or team@<model>
  const parts = [from, extra || ""].filter((x) => x);
  return parts.length ? `?${parts.join("&")}` : "";
}

async function selectSearch(key, nodeId, from) {
  state.key = key;
  state.from = from || "local";
  state.node = null;
  state.nodeId = nodeId === undefined ? null : nodeId;
  location.hash = searchHash();
  renderList();
  $("node").hidden = true;
  await refreshSearch();
  if (state.nodeId !== null) await selectNode(state.nodeId);
}

async function refreshSearch() {
  if (!state.key) return;
  try {
    state.search = await getJSON(`/api/searches/${state.key}${fromQuery()}`);
  } catch (e) {
    $("search").hidden = false;
    $("search-title").textContent = state.key;
    $("search-reason").textContent = e.message;
    $("search-reason").className = "error";
    clear($("tree"));
    return;
  }
  renderSearch(state.search);
}

function renderSearch(v) {
  const s = v.listing;
  $("search").hidden = false;
  const model = state.from.split("@")[1];
  const where = state.from === "local" ? "" : `team store${model ? ` (${model})` : ""}: `;
  $("search-title").textContent = `${where}${s.op}  ${s.tensors}`;
  $("search-reason").className = "";
  $("search-reason").textContent = s.state === "live"
    ? `searching: ${s.iterations} of ${s.iterations_budget} iterations` : s.reason;
  const failed = Object.entries(v.failures_by_stage).map(([k, n]) => `${n} at ${k}`).join(", ");
  facts($("search-facts"), [
    ["state", `${s.state}${s.stop_reason ? ` (stopped: ${s.stop_reason})` : ""}`],
    ["decision", s.decision],
    ["eager", us(v.eager_us)],
    ["roofline floor", v.bandwidth_gbps ? `${us(v.floor_us)} at ${num(v.bandwidth_gbps, 0)} GB/s` : us(v.floor_us)],
    ["best", s.best_speedup
      ? `node ${v.best_id}: ${num(s.best_speedup, 2)}x eager, ${num(s.best_pct_roofline, 1)}% of roofline`
      : "none verified"],
    ["winner re-measured", (v.winner_remeasured_us || []).map((t) => num(t, 2)).join(", ")
      + (v.winner_remeasured_us && v.winner_remeasured_us.length ? " us" : "")],
    ["iterations to best", v.iterations_to_best],
    ["failures", failed],
    ["key", s.key],
    ["updated", ago(s.updated_at)],
  ]);
  $("card-text").textContent = v.card_text;
  renderLegend();
  renderTree(v);
}

function renderLegend() {
  const lg = clear($("legend"));
  for (const [cls, text] of [["root", "eager"], ["ok", "verified"], ["failed", "failed"], ["pending", "running"]]) {
    lg.appendChild(el("span", `dot ${cls}`));
    lg.appendChild(el("span", null, `${text}  `));
  }
  lg.appendChild(el("span", "winner", "bold: the winner"));
}

function nodeLine(n, v) {
  const parts = [`#${n.id}`, n.action];
  if (n.status === "ok") parts.push(`${us(n.time_us)}, ${num(n.speedup, 2)}x, ${num(n.pct_bw, 0)}% bw`);
  if (n.status === "root") parts.push(us(n.time_us));
  if (n.status === "failed") parts.push(`${n.failure_stage}: ${(n.failure_reason || "").split("\n")[0].slice(0, 90)}`);
  if (n.id === v.best_id && n.id !== v.winner_id) parts.push("(fastest)");
  return parts.join("  ·  ");
}

function renderTree(v) {
  const kids = new Map();
  for (const n of v.nodes) {
    if (n.parent === null) continue;
    if (!kids.has(n.parent)) kids.set(n.parent, []);
    kids.get(n.parent).push(n);
  }
  const tree = clear($("tree"));
  const add = (ul, n) => {
    const li = el("li");
    const row = el("div", `row${n.id === state.nodeId ? " selected" : ""}${n.id === v.winner_id ? " winner" : ""}`);
    row.appendChild(el("span", `dot ${n.status}`));
    row.appendChild(el("span", n.duplicate_of !== null && n.duplicate_of !== undefined ? "dup" : "", nodeLine(n, v)));
    row.title = n.description || n.action;
    row.addEventListener("click", () => selectNode(n.id));
    li.appendChild(row);
    const children = kids.get(n.id) || [];
    if (children.length) {
      const sub = el("ul");
      for (const c of children) add(sub, c);
      li.appendChild(sub);
    }
    ul.appendChild(li);
  };
  if (v.nodes.length) add(tree, v.nodes[0]);
}

// ---- one node ----------------------------------------------------------------------------------------------------

async function selectNode(id, against) {
  if (!state.node || state.node.id !== id) state.tab = null;  // a new node opens on its own default tab
  const base = fromQuery(against === undefined || against === null ? "" : `against=${against}`);
  state.nodeId = id;
  location.hash = searchHash();
  for (const r of document.querySelectorAll(".tree .row")) r.classList.remove("selected");
  let node;
  try {
    node = await getJSON(`/api/searches/${state.key}/nodes/${id}${base}`);
  } catch (e) {
    $("node").hidden = false;
    $("node-title").textContent = `node ${id}`;
    $("node-why").textContent = e.message;
    $("node-why").className = "error";
    return;
  }
  state.node = node;
  if (state.search) renderTree(state.search);
  renderNode(node);
}

function defaultTab(n) {
  if (n.status === "failed") return n.failure_stage === "verify" ? "verification" : "compile log";
  if (n.diff) return "diff";
  return n.source ? "source" : "params";
}

function renderNode(n) {
  $("node").hidden = false;
  $("node-title").textContent = `node ${n.id}: ${n.action}`;
  $("node-why").className = n.status === "failed" ? "error" : "";
  $("node-why").textContent = n.why;
  $("node-lineage").textContent = "path: " + n.lineage.map((s) => `#${s.id} ${s.action}`).join("  →  ");
  facts($("node-facts"), [
    ["status", n.status + (n.is_winner ? " (the winner)" : "")],
    ["proposer", n.proposer],
    ["description", n.description],
    ["time", n.time_us === null ? ""
      : `${us(n.time_us)}, ${num(n.speedup, 2)}x eager, ${num(n.pct_bw, 1)}% of the copy bandwidth`],
    ["reward", `${num(n.reward, 3)} (visits ${n.visits}, subtree best ${num(n.best_reward, 3)})`],
    ["iteration", n.iteration || ""],
    ["same kernel as", n.extra && n.extra.duplicate_of !== undefined ? `node ${n.extra.duplicate_of}` : ""],
  ]);
  const tabs = {
    "diff": () => n.diff || `(no diff: this node or node ${n.diff_against} has no source, or they are the same)`,
    "source": () => n.source || "(no source)",
    "params": () => JSON.stringify({ params: n.params, changed_from_parent: n.params_changed }, null, 1),
    "launch plan": () => JSON.stringify(n.plan, null, 1),
    "compile log": () => n.compile_log || "(empty)",
    "verification": () => JSON.stringify(n.verify_report, null, 1),
    "extra": () => JSON.stringify(n.extra, null, 1),
  };
  if (!state.tab || !(state.tab in tabs)) state.tab = defaultTab(n);
  const nav = clear($("tabs"));
  for (const name of Object.keys(tabs)) {
    const b = el("button", name === state.tab ? "active" : "", name);
    b.addEventListener("click", () => { state.tab = name; renderNode(n); });
    nav.appendChild(b);
  }
  if (state.tab === "diff") diffChoices(nav, n);
  const body = clear($("tab-body"));
  const text = tabs[state.tab]();
  if (state.tab !== "diff" || !n.diff) { body.textContent = text; return; }
  for (const line of text.split("\n")) {
    const head = line.startsWith("+++") || line.startsWith("---") || line.startsWith("@@");
    const cls = head ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    body.appendChild(el("span", cls, (line || " ") + "\n"));
  }
}

// The diff is against the parent by default; the best and the winner are a click away.
function diffChoices(nav, n) {
  const choices = [["parent", n.parent], ["best", n.best_id], ["winner", n.winner_id]];
  const seen = new Set([n.id]);
  nav.appendChild(el("span", "sub", "  against: "));
  for (const [name, id] of choices) {
    if (id === null || id === undefined || seen.has(id)) continue;
    seen.add(id);
    const b = el("button", id === n.diff_against ? "active" : "", `${name} #${id}`);
    b.addEventListener("click", () => selectNode(n.id, name === "parent" ? null : id));
    nav.appendChild(b);
  }
}

// ---- the kernels a compile here can use: local, team, shipped ----------------------------------------------------

function showView(view) {
  state.view = view;
  const searches = view === "searches";
  $("searches").hidden = !searches;
  $("search").hidden = !searches || !state.key;
  $("node").hidden = !searches || state.nodeId === null;
  $("kernels").hidden = view !== "kernels";
  $("kernel").hidden = view !== "kernels" || !kstate.key;
  $("show-searches").className = view === "searches" ? "active" : "";
  $("show-kernels").className = view === "kernels" ? "active" : "";
}

async function openKernels(tier, key) {
  showView("kernels");
  location.hash = tier && key ? `kernels/${tier}/${key}` : "kernels";
  await refreshKernels();
  if (tier && key) await selectKernel(tier, key);
}

async function refreshKernels() {
  try {
    kstate.body = await getJSON("/api/kernels");
  } catch (e) {
    status(`cannot read the kernels: ${e.message}`, true);
    return;
  }
  const tiers = clear($("tiers"));
  for (const t of kstate.body.tiers) {
    const text = t.readable
      ? `${t.name}: ${t.records} records${t.corrupt ? `, ${t.corrupt} corrupt` : ""} (${t.where})`
      : `${t.name}: ${t.problem}`;
    tiers.appendChild(el("li", t.readable ? "" : "sub", text));
  }
  renderKernelList();
  const n = kstate.body.kernels.length;
  const readable = kstate.body.tiers.filter((t) => t.readable).length;
  status(`${n} records in ${readable} tiers; read ${new Date().toLocaleTimeString()}`);
}

function kernelText(k) {
  return [k.op, k.tensors, k.tier, k.decision, k.gpu, k.proposer, k.source, k.key, k.corrupt].join(" ").toLowerCase();
}

function renderKernelList() {
  const ol = clear($("kernel-list"));
  const q = $("kfilter").value.trim().toLowerCase();
  for (const k of kstate.body.kernels) {
    if (q && !kernelText(k).includes(q)) continue;
    const selected = k.tier === kstate.tier && k.key === kstate.key;
    const li = el("li", `${selected ? "selected" : ""}${k.answers || k.corrupt ? "" : " shadowed"}`);
    const head = el("div");
    head.appendChild(el("span", `badge ${k.tier.split("@")[0]}`, k.tier));
    head.appendChild(el("span", `badge ${k.corrupt ? "corrupt" : k.decision}`, k.corrupt ? "corrupt" : k.decision));
    head.appendChild(el("span", "op", k.op || k.key.slice(0, 16)));
    li.appendChild(head);
    li.appendChild(el("div", "sub", k.corrupt ? k.corrupt : k.tensors));
    if (!k.corrupt) {
      const inductor = k.speedup_vs_inductor ? `, ${num(k.speedup_vs_inductor, 2)}x Inductor's op` : "";
      const speed = k.decision === "kernel"
        ? `${num(k.speedup_vs_eager, 2)}x eager${inductor}, ${num(k.pct_bw, 0)}% bw` : "PyTorch kept";
      const unused = k.tier.includes("@") ? "for that GPU model's machines" : "not used: another tier answers";
      const where = [k.gpu, k.trusted ? "" : "untrusted", k.answers ? "" : unused];
      li.appendChild(el("div", "sub", [speed, ...where].filter((x) => x).join(" · ")));
    }
    li.addEventListener("click", () => openKernels(k.tier, k.key));
    ol.appendChild(li);
  }
}

async function selectKernel(tier, key) {
  kstate.tier = tier;
  kstate.key = key;
  renderKernelList();
  $("kernel").hidden = false;
  let rec;
  try {
    rec = await getJSON(`/api/kernels/${tier}/${key}`);
  } catch (e) {
    $("kernel-title").textContent = `${tier} ${key}`;
    $("kernel-why").textContent = e.message;
    $("kernel-why").className = "error";
    clear($("kernel-facts"));
    clear($("ktabs"));
    clear($("ktab-body"));
    return;
  }
  kstate.record = rec;
  renderKernel(rec);
}

function kernelWhy(rec) {
  const r = rec.row;
  if (rec.answers === r.tier) {
    const what = r.decision === "kernel" ? "this kernel" : "PyTorch's own op (this record says nothing beat it)";
    const check = r.trusted ? "" : "; it is untrusted, so it is re-verified on this GPU before its first use";
    return `A compile here gets ${what}${check}.`;
  }
  if (r.tier.includes("@")) {  // Note [a team of several GPU models] in store/team.py
    return `The team's kernel for machines whose GPU is ${r.gpu || r.tier.split("@")[1]}: such a machine takes it `
      + "before the key's own team record. This view looks keys up as a machine with no GPU named does.";
  }
  if (!rec.answers) return "Not used here: no tier holds a valid record of this key.";
  return `Not used here: the ${rec.answers} tier's record of this key answers first (local, then team, then shipped).`;
}

function renderKernel(rec) {
  const r = rec.row;
  $("kernel-title").textContent = `${r.op}  ${r.tensors}`;
  $("kernel-why").className = "";
  $("kernel-why").textContent = kernelWhy(rec);
  const t = rec.timings;
  const others = rec.in_tiers.filter((x) => x !== r.tier);
  const time = `${us(r.kforge_us)} against eager's ${us(r.eager_us)}: ${num(r.speedup_vs_eager, 2)}x, `
    + `${num(r.pct_bw, 1)}% of the copy bandwidth`;
  const floor = `${us(t.floor_us)}${t.bandwidth_gbps ? ` at ${num(t.bandwidth_gbps, 0)} GB/s` : ""}`;
  facts($("kernel-facts"), [
    ["tier", r.tier + (others.length ? ` (also in: ${others.join(", ")})` : "")],
    ["decision", r.decision + (rec.description ? `: ${rec.description}` : "")],
    ["time", r.kforge_us === null ? "" : time],
    ["vs Inductor's op", r.speedup_vs_inductor ? `${num(r.speedup_vs_inductor, 2)}x (its ${us(t.inductor_us)})` : ""],
    ["roofline floor", t.floor_us ? floor : ""],
    ["measured on", [r.gpu, rec.provenance.hostname].filter((x) => x).join(" · ")],
    ["found by", [r.proposer, r.source, r.trusted ? "trusted" : "untrusted"].filter((x) => x).join(" · ")],
    ["created", r.created_at],
    ["key", r.key],
  ]);
  const tabs = {
    "source": () => rec.source || "(no kernel: PyTorch's op is kept)",
    "launch plan": () => JSON.stringify(rec.plan, null, 1),
    "params": () => JSON.stringify(rec.params, null, 1),
    "operator card": () => rec.card_text,
    "verification": () => JSON.stringify(rec.verification, null, 1),
    "timings": () => JSON.stringify(rec.timings, null, 1),
    "provenance": () => JSON.stringify(rec.provenance, null, 1),
    "signature": () => JSON.stringify(rec.signature, null, 1),
  };
  if (!kstate.tab || !(kstate.tab in tabs)) kstate.tab = rec.source ? "source" : "operator card";
  const nav = clear($("ktabs"));
  for (const name of Object.keys(tabs)) {
    const b = el("button", name === kstate.tab ? "active" : "", name);
    b.addEventListener("click", () => { kstate.tab = name; renderKernel(rec); });
    nav.appendChild(b);
  }
  if (r.has_search) {  // this cache's search of it, or the teammate's that the team store holds
    const team = r.tier.startsWith("team");
    const b = el("button", "link", team ? "its search tree (a teammate's)" : "its search tree");
    b.addEventListener("click", () => {
      showView("searches");
      selectSearch(r.key, undefined, team ? r.tier : "local");
    });
    nav.appendChild(b);
  }
  $("ktab-body").textContent = tabs[kstate.tab]();
}

// ---- polling -----------------------------------------------------------------------------------------------------

async function tick() {
  if (state.view !== "searches") return;  // the kernels view reads the tiers when opened or refreshed
  try {
    await refreshList();
    const sel = state.from === "local" && state.list.find((s) => s.key === state.key);
    if (sel && sel.state === "live") {
      await refreshSearch();
      if (state.node && state.node.status === "pending") await selectNode(state.nodeId);
    }
  } catch (e) {
    status(`cannot reach the kforge ui server: ${e.message}`, true);
  }
}

$("filter").addEventListener("input", renderList);
$("kfilter").addEventListener("input", () => { if (kstate.body) renderKernelList(); });
$("krefresh").addEventListener("click", refreshKernels);
$("show-kernels").addEventListener("click", () => openKernels(kstate.tier, kstate.key));
$("show-searches").addEventListener("click", () => {
  showView("searches");
  location.hash = searchHash();
  tick();
});

(async () => {
  const parts = location.hash.slice(1).split("/");
  if (parts[0] === "kernels") {
    state.view = "kernels";
    await openKernels(parts[1], parts[2]);
  } else {
    await tick();
    const from = parts[0].startsWith("team") ? parts[0] : "local";
    const [key, node] = from === "local" ? parts : parts.slice(1);
    if (key) await selectSearch(key, node === undefined || node === "" ? undefined : Number(node), from);
  }
  setInterval(tick, POLL_MS);
})();
