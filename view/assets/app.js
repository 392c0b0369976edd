// forkline view: the pages, built from the server's JSON API with DOM
// calls only (a dataset is untrusted input: nothing it holds becomes HTML).
// Routes live in the location hash:
//   #/                          the runs (and a comparison picker)
//   #/run/N                     a run's summary
//   #/run/N/episodes?QUERY      its episode list (QUERY: the API's parameters)
//   #/run/N/episode/ID          one episode
//   #/compare/A/B               two runs side by side
// Values that change from one collection to the next (times, run ids,
// dates) carry the class "volatile".
"use strict";

const main = () => document.getElementById("main");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "style") {
      // Through the CSSOM, which the page's CSP allows (a style attribute or cssText it refuses).
      for (const decl of v.split(";")) {
        const i = decl.indexOf(":");
        if (i > 0) e.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
      }
    }
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

const volatile = (v) => el("span", { class: "volatile" }, v);
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number.isInteger(x) ? String(x) : Number(x).toFixed(d).replace(/\.?0+$/, ""));
const ms = (x) => volatile(x === undefined || x === null ? "–" : Number(x).toFixed(1) + " ms");

async function api(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// runSummary is a run's summary; while the server is still reading it
// (it answers summarising) the page says so and asks again.
async function runSummary(n) {
  for (;;) {
    const r = await api(`/api/runs/${n}`);
    if (!r.summarising) return r;
    main().replaceChildren(el("p", { id: "summarising", class: "muted" }, `summarising ${r.dir}…`));
    await new Promise((ok) => setTimeout(ok, 500));
  }
}

function kv(obj) {
  const box = el("div", { class: "kv" });
  for (const [k, v] of Object.entries(obj || {})) {
    if (v === undefined || v === null || v === "") continue;
    let shown = v;
    if (typeof v === "object" && !(v instanceof Node) && !Array.isArray(v)) shown = el("code", {}, JSON.stringify(v));
    box.append(el("div", {}, k), el("div", {}, shown));
  }
  return box;
}

function table(head, rows, numeric = []) {
  const t = el("table", {});
  t.append(el("tr", {}, head.map((h, i) => el("th", { class: numeric.includes(i) ? "num" : null }, h))));
  for (const r of rows) t.append(el("tr", {}, r.map((c, i) => el("td", { class: numeric.includes(i) ? "num" : null }, c))));
  return t;
}

function listLink(run, params, text) {
  const q = new URLSearchParams(params).toString();
  return el("a", { href: `#/run/${run}/episodes${q ? "?" + q : ""}` }, text);
}

function setNav(run) {
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  if (run !== undefined) nav.append(el("a", { href: `#/run/${run}` }, "run"), el("a", { href: `#/run/${run}/episodes` }, "episodes"));
}

// ---- runs

async function pageRuns() {
  setNav();
  const data = await api("/api/runs");
  if (data.runs.length === 1) { location.replace(`#/run/0`); return; }
  const m = main();
  m.replaceChildren(el("h1", {}, "Runs"));
  m.append(table(["#", "dataset", "status", "episodes", "run id"],
    data.runs.map((r) => [String(r.index), el("a", { href: `#/run/${r.index}`, class: "volatile" }, r.dir), r.damaged ? el("span", { class: "error" }, "damaged") : r.summarising ? `${r.status}, summarising…` : r.status,
      r.episodes === null ? "…" : String(r.episodes), volatile(r.run_id)]), [3]));
  const a = el("select", { id: "cmp-a" }, data.runs.map((r) => el("option", { value: r.index }, `${r.index}: ${r.dir}`)));
  const b = el("select", { id: "cmp-b" }, data.runs.map((r) => el("option", { value: r.index }, `${r.index}: ${r.dir}`)));
  b.value = "1";
  m.append(el("h2", {}, "Compare two runs"), el("p", {}, a, " with ", b, " ",
    el("button", { id: "cmp-go", onclick: () => { location.hash = `#/compare/${a.value}/${b.value}`; } }, "compare")));
}

// ---- one run

function histogram(run, rw) {
  const rows = [];
  const bins = rw.values && rw.values.length ? rw.values.map((v) => ({ low: v.value, high: v.value, count: v.count })) : rw.histogram || [];
  const most = Math.max(1, ...bins.map((b) => b.count));
  for (const b of bins) {
    const label = b.low === b.high ? fmt(b.low) : `${fmt(b.low)} – ${fmt(b.high)}`;
    rows.push(el("tr", {}, el("td", { class: "num mono" }, listLink(run, { min_reward: b.low, max_reward: b.high }, label)),
      el("td", { class: "num" }, String(b.count)),
      el("td", {}, el("span", { class: "bar", style: `width:${Math.round(300 * b.count / most)}px` }))));
  }
  if (rw.null) rows.push(el("tr", {}, el("td", { class: "num mono" }, "no value"), el("td", { class: "num" }, String(rw.null)), el("td", {})));
  return el("table", { class: "hist", id: "histogram" }, rows);
}

function exits(run, task, by) {
  return Object.keys(by || {}).sort().map((k, i) => [i ? ", " : "",
    listLink(run, task ? { task, exit: k } : { exit: k }, `${k}=${by[k]}`)]);
}

async function pageRun(n) {
  setNav(n);
  const r = await runSummary(n);
  const s = r.summary;
  const m = main();
  m.replaceChildren(el("h1", {}, "Run ", el("span", { class: "mono volatile" }, r.dir)));
  if (r.damaged) m.append(el("p", { class: "error" }, r.damaged));
  m.append(kv({
    status: s.status, "run id": volatile(s.run_id), created: volatile(s.created_at), updated: volatile(s.updated_at),
    forkline: `${s.tool_version}, dataset schema ${s.schema_version}`, episodes: `${s.episodes} (${s.steps} steps; scaffold losses ${s.scaffold_losses})`,
  }));
  const prov = s.provider && { name: s.provider.name, reset: s.provider.reset, image: s.provider.image, params: s.provider.params,
    "fork method": s.provider.capabilities && s.provider.capabilities.fork_method, isolation: s.provider.capabilities && s.provider.capabilities.isolation };
  m.append(el("div", { class: "cols4" },
    el("div", {}, el("h2", {}, "Plan"), kv(s.plan && { episodes: s.plan.episodes, repeats: s.plan.repeats, replicas: s.plan.replicas, seed: s.plan.seed,
      reset: s.plan.reset, branch: s.plan.branch, part: s.plan.part && s.plan.part.count > 1 ? `${s.plan.part.index}/${s.plan.part.count}` : null,
      from: s.plan.from && volatile(s.plan.from.dataset) })),
    el("div", {}, el("h2", {}, "Provider"), kv(prov)),
    el("div", {}, el("h2", {}, "Policy"), kv(s.policy && { name: s.policy.name, options: s.policy.options, script: s.policy.script_file })),
    el("div", {}, el("h2", {}, "Capture"), kv(s.capture))));
  if ((s.problems || []).length) m.append(el("h2", {}, "Problems"), el("ul", { class: "error" }, s.problems.map((p) => el("li", {}, p))));

  m.append(el("h2", {}, "Tasks"));
  m.append(el("p", {}, "exit reasons: ", exits(n, "", s.by_exit_reason), "  ", listLink(n, {}, "all episodes")));
  m.append(el("table", { id: "tasks" }, el("tr", {}, ["task", "episodes", "steps", `${s.reward.name} mean`, "exit reasons"].map((h, i) => el("th", { class: i && i < 4 ? "num" : null }, h))),
    (s.tasks || []).map((t) => el("tr", {}, el("td", {}, listLink(n, { task: t.id }, t.id)), el("td", { class: "num" }, String(t.episodes)),
      el("td", { class: "num" }, String(t.steps)), el("td", { class: "num" }, fmt(t.reward_mean)), el("td", {}, exits(n, t.id, t.by_exit_reason))))));

  const rw = s.reward;
  m.append(el("h2", {}, `Reward "${rw.name}"`),
    el("p", {}, `${rw.count} values, mean ${fmt(rw.mean)}, min ${fmt(rw.min)}, max ${fmt(rw.max)}`), histogram(n, rw));
  m.append(el("h2", {}, "Reset latency"), table(["strategy/method", "p50", "p95", "n"],
    (s.reset_ms || []).map((l) => [l.key, ms(l.p50), ms(l.p95), String(l.n)]), [1, 2, 3]));
  const tk = s.tokens || {};
  m.append(el("h2", {}, "Tokens"), el("p", { id: "tokens" },
    `${tk.episodes_with_token_record || 0} of ${s.episodes} episodes have a token record (${tk.token_turns || 0} model turns); `,
    listLink(n, { drift: "true" }, `${tk.episodes_with_token_drift || 0} flagged with token drift`),
    tk.token_cut ? ` (cut: ${Object.entries(tk.token_cut).map(([k, v]) => `${k}=${v}`).join(", ")})` : ""));
  if ((r.replay_reports || []).length) {
    m.append(el("h2", {}, "Replay reports"), el("ul", {}, r.replay_reports.map((p) => el("li", {}, el("a", { href: `/reports/${p.index}`, target: "_blank" }, p.name), ` (${p.kind})`))));
  }
}

// ---- the episode list

const sortKeys = ["episode_id", "task_id", "exit_reason", "reward", "steps", "duration_ms", "reset_ms", "repeat"];

async function pageEpisodes(n, params) {
  setNav(n);
  const run = await runSummary(n);
  const s = run.summary;
  const m = main();
  const form = el("form", { class: "filters", id: "filters" });
  const field = (label, input) => el("label", {}, label, input);
  const taskSel = el("select", { name: "task" }, el("option", { value: "" }, "any"), (s.tasks || []).map((t) => el("option", { value: t.id }, t.id)));
  const exitSel = el("select", { name: "exit" }, el("option", { value: "" }, "any"), Object.keys(s.by_exit_reason || {}).sort().map((k) => el("option", { value: k }, k)));
  const tri = (name) => el("select", { name }, el("option", { value: "" }, "any"), el("option", { value: "true" }, "yes"), el("option", { value: "false" }, "no"));
  form.append(
    field("task", taskSel), field("exit reason", exitSel),
    field(`${s.reward.name} ≥`, el("input", { name: "min_reward", class: "short", type: "number", step: "any" })),
    field(`${s.reward.name} ≤`, el("input", { name: "max_reward", class: "short", type: "number", step: "any" })),
    field("token drift", tri("drift")), field("a branch", tri("branch")),
    field("text in actions/observations", el("input", { name: "text", type: "search" })),
    field("sort by", el("select", { name: "sort" }, sortKeys.map((k) => el("option", { value: k }, k)))),
    field("order", el("select", { name: "desc" }, el("option", { value: "false" }, "ascending"), el("option", { value: "true" }, "descending"))),
    field("per page", el("select", { name: "limit" }, [25, 50, 100, 500].map((k) => el("option", { value: k }, k)))),
    el("button", { type: "submit", id: "apply" }, "apply"));
  for (const [k, v] of params) { const f = form.elements[k]; if (f) f.value = v; }
  if (!params.get("limit")) form.elements.limit.value = "50";
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const f of form.elements) if (f.name && f.value !== "" && !(f.name === "desc" && f.value === "false") && !(f.name === "sort" && f.value === "episode_id")) q.set(f.name, f.value);
    location.hash = `#/run/${n}/episodes?${q}`;
  });
  m.replaceChildren(el("h1", {}, "Episodes of ", el("span", { class: "mono volatile" }, run.dir)), form);
  const status = el("p", { id: "list-status", class: "muted" }, "reading…");
  m.append(status);
  const page = await api(`/api/runs/${n}/episodes?${params}`);
  status.textContent = `${page.matched} of ${page.scanned} episodes match; ${page.episodes.length ? `${page.offset + 1}–${page.offset + page.episodes.length}` : "none"} shown`;
  const rows = page.episodes.map((e) => el("tr", { "data-episode": e.episode_id },
    el("td", { class: "mono" }, el("a", { href: `#/run/${n}/episode/${e.episode_id}` }, e.episode_id.slice(0, 12))),
    el("td", {}, e.task_id), el("td", { class: "num" }, String(e.repeat)),
    el("td", { class: "exit-" + e.exit_reason }, e.exit_reason), el("td", { class: "num" }, fmt(e.reward)),
    el("td", { class: "num" }, String(e.steps)), el("td", { class: "num" }, ms(e.duration_ms)), el("td", { class: "num" }, ms(e.reset_ms)),
    el("td", {}, e.token_drift ? "drift" : e.token_turns ? `${e.token_turns} turns` : ""),
    el("td", { class: "mono" }, e.parent_episode_id ? [el("a", { href: `#/run/${n}/episode/${e.parent_episode_id}` }, e.parent_episode_id.slice(0, 8)), ` @${e.branch_step}`] : "")));
  m.append(el("table", { id: "episodes" }, el("tr", {}, ["episode", "task", "repeat", "exit", page.reward, "steps", "duration", "reset", "tokens", "branch of"].map((h) => el("th", {}, h))), rows));
  const pager = el("div", { class: "pager" });
  const go = (off) => { const q = new URLSearchParams(params); q.set("offset", off); return `#/run/${n}/episodes?${q}`; };
  if (page.offset > 0) pager.append(el("a", { href: go(Math.max(0, page.offset - page.limit)), id: "prev" }, "← previous"));
  if (page.offset + page.episodes.length < page.matched) pager.append(el("a", { href: go(page.offset + page.limit), id: "next" }, "next →"));
  m.append(pager);
}

// ---- one episode

function axTree(node) {
  if (!node || typeof node !== "object") return el("span", {}, String(node));
  const label = [el("b", {}, node.role || "?"), node.name ? ` "${node.name}"` : "", node.value ? ` = ${node.value}` : "", (node.states || []).length ? ` [${node.states.join(", ")}]` : ""];
  const kids = node.children || [];
  if (!kids.length) return el("li", {}, label);
  return el("li", {}, el("details", { open: true }, el("summary", {}, label), el("ul", { class: "tree" }, kids.map(axTree))));
}

function a11yBlock(json, title) {
  let tree;
  try { tree = JSON.parse(json); } catch (e) { return el("pre", {}, json); }
  return el("details", { class: "a11y" }, el("summary", {}, title), el("ul", { class: "tree" }, axTree(tree)));
}

function rewardsBlock(rewards) {
  return rewards.map((r) => el("div", { class: "reward" },
    el("b", {}, `${r.name}: ${fmt(r.value)}`), r.source ? el("span", { class: "muted" }, ` from ${r.source} (exit ${r.exit_code})`) : "",
    r.detail ? el("pre", {}, r.detail) : ""));
}

function treeBlock(n, node, current) {
  const rw = node.rewards ? Object.entries(node.rewards).map(([k, v]) => `${k}=${fmt(v)}`).join(" ") : "no reward";
  const label = [el("a", { href: `#/run/${n}/episode/${node.episode_id}`, class: node.episode_id === current ? "current" : null }, node.episode_id.slice(0, 12)),
    node.parent_episode_id ? ` branch ${node.branch_index} at step ${node.branch_step}` : " root", `: ${node.exit_reason}, ${node.steps} steps, ${rw}`];
  return el("li", {}, label, (node.branches || []).length ? el("ul", { class: "tree" }, node.branches.map((b) => treeBlock(n, b, current))) : "");
}

function heat(lp) {
  // exp(logprob) from 0 (red) to 1 (green).
  const p = Math.max(0, Math.min(1, Math.exp(lp)));
  return `hsl(${Math.round(120 * p)}, 70%, 82%)`;
}

const tokenLimit = 4000;

function tokensBlock(t) {
  const box = el("div", { id: "token-record" });
  box.append(el("p", {}, `${t.prompt_ids.length} prompt tokens, ${t.response_ids.length} response tokens (${t.response_mask.filter((x) => x === 1).length} the model's, trained on); `,
    `${t.token_turns} of ${t.model_turns} model turns recorded`, t.token_drift ? el("span", { class: "error" }, ` — token drift: the record is cut (${t.token_cut || "drift"})`) : ""));
  box.append(el("p", { class: "legend muted" }, el("span", {}, el("span", { class: "tok p" }, "123"), " prompt"),
    el("span", {}, el("span", { class: "tok", style: `background:${heat(-3)}` }, "123"), el("span", { class: "tok", style: `background:${heat(-0.01)}` }, "123"), " the model's tokens, by probability (red low, green high)"),
    el("span", {}, el("span", { class: "tok obs" }, "123"), " observation tokens (loss mask 0)")));
  const prompt = el("div", { class: "tokens" }, t.prompt_ids.slice(0, tokenLimit).map((id) => el("span", { class: "tok p" }, String(id))));
  box.append(el("details", {}, el("summary", {}, `prompt ids (${t.prompt_ids.length})`), prompt));
  const resp = el("div", { class: "tokens", id: "response-tokens" });
  const ends = new Set(t.turn_ends);
  t.response_ids.slice(0, tokenLimit).forEach((id, i) => {
    const m = t.response_mask[i];
    const lp = t.response_logprobs && t.response_logprobs.length > i ? t.response_logprobs[i] : null;
    resp.append(el("span", { class: m === 1 ? "tok" : "tok obs", style: m === 1 && lp !== null ? `background:${heat(lp)}` : null, title: lp !== null ? `id ${id}, logprob ${lp.toFixed(3)}` : `id ${id}` }, String(id)));
    if (ends.has(i + 1)) resp.append(el("span", { class: "turn-end", title: "end of a model turn" }));
  });
  if (t.response_ids.length > tokenLimit) resp.append(el("span", { class: "muted" }, ` … ${t.response_ids.length - tokenLimit} more`));
  if (t.token_drift) resp.append(el("span", { class: "cut", id: "drift-cut" }, `cut here: ${t.token_cut || "drift"} (turns after ${t.token_turns} are not in the record)`));
  box.append(el("div", { class: "role" }, "response ids"), resp);
  return box;
}

async function pageEpisode(n, id) {
  setNav(n);
  const e = await api(`/api/runs/${n}/episodes/${encodeURIComponent(id)}`);
  const m = main();
  const shot = (step) => `/api/runs/${n}/episodes/${encodeURIComponent(e.episode_id)}/screenshot?step=${step}`;
  const shown = new Set((e.steps || []).flatMap((s) => s.prompt_images || []));
  m.replaceChildren(el("h1", {}, "Episode ", el("span", { class: "mono" }, e.episode_id)));
  m.append(kv({
    task: e.task_id, repeat: String(e.repeat), exit: e.exit_reason, detail: e.detail, answer: e.answer, provider: e.provider,
    replica: String(e.replica), reset: [e.reset, " ", ms(e.reset_ms)], duration: ms(e.duration_ms),
    "branch of": e.parent_episode_id ? el("a", { href: `#/run/${n}/episode/${e.parent_episode_id}` }, `${e.parent_episode_id} at step ${e.branch_step}`) : null,
  }));
  for (const r of e.replay_reports || []) m.append(el("p", {}, "replay: ", el("a", { href: `/reports/${r.report}`, target: "_blank" }, r.name), `: ${r.status} (${r.steps_matched} of ${r.steps} steps matched)`));
  if (e.tree) m.append(el("h2", {}, "Branching tree"), el("ul", { class: "tree", id: "branch-tree" }, treeBlock(n, e.tree, e.episode_id)));

  m.append(el("h2", {}, "Rewards"), el("div", { id: "rewards" }, rewardsBlock((e.rewards || []).filter((r) => r.step === undefined || r.step === null))));

  m.append(el("h2", {}, "Transcript, as the model saw it"));
  const tr = el("div", { id: "transcript" });
  if (e.system) tr.append(el("div", { class: "role" }, "system"), el("pre", {}, e.system));
  tr.append(el("div", { class: "role" }, "user: the task's instruction"), el("pre", {}, e.instruction || ""));
  if (e.start) {
    tr.append(el("div", { class: "role" }, "start page"), el("pre", {}, e.start));
    if (e.start_screenshot_sha256) tr.append(el("img", { class: "shot", src: shot("start"), alt: "start page" }));
    if (e.start_a11y_tree) tr.append(a11yBlock(e.start_a11y_tree, "accessibility tree of the start page"));
  }
  for (const s of e.steps || []) {
    const box = el("div", { class: "step", id: `step-${s.index}` });
    box.append(el("h3", {}, `step ${s.index}`, el("span", { class: "muted" }, " policy ", ms(s.policy_ms), ", environment ", ms(s.env_ms))));
    if (s.reasoning) box.append(el("div", { class: "role" }, "reasoning"), el("pre", {}, s.reasoning));
    if (s.model_text) box.append(el("div", { class: "role" }, `assistant${s.model ? " (" + s.model + ")" : ""}`), el("pre", {}, s.model_text));
    if (s.action_kind) box.append(el("div", { class: "role" }, "action"), el("pre", { class: "action" }, `${s.action_kind} ${JSON.stringify(s.arguments)}`));
    else if (s.tool_calls) box.append(el("div", { class: "role" }, "tool calls"), el("pre", {}, JSON.stringify(s.tool_calls, null, 1)));
    else box.append(el("div", { class: "muted" }, "no action"));
    box.append(el("div", { class: "role" }, "observation"), el("pre", { class: "observation" }, s.observation || ""));
    if (s.screenshot && s.screenshot.stored !== "none") {
      box.append(el("img", { class: "shot", src: shot(s.index), alt: `screenshot of step ${s.index}` }),
        el("div", { class: "muted" }, `${s.screenshot.width}×${s.screenshot.height}, ${shown.has(s.screenshot.sha256) ? "shown to the model" : "not shown to the model"}`));
    } else if (s.screenshot) box.append(el("div", { class: "muted" }, "screenshot taken, pixels not kept (pixels=none)"));
    const ax = (e.step_a11y_trees || {})[s.index];
    if (ax) box.append(a11yBlock(ax, `accessibility tree (${ax.length} bytes)`));
    if ((s.rewards || []).length) box.append(el("div", { class: "role" }, "step rewards"), rewardsBlock(s.rewards));
    tr.append(box);
  }
  m.append(tr);
  if (e.tokens) m.append(el("h2", {}, "Token record"), tokensBlock(e.tokens));
}

// ---- two runs

async function pageCompare(a, b) {
  setNav();
  const [ra, rb] = await Promise.all([runSummary(a), runSummary(b)]);
  const m = main();
  m.replaceChildren(el("h1", {}, "Compare runs"));
  const byTask = new Map();
  for (const [i, r] of [[0, ra], [1, rb]]) for (const t of r.summary.tasks || []) {
    if (!byTask.has(t.id)) byTask.set(t.id, [null, null]);
    byTask.get(t.id)[i] = t;
  }
  const name = ra.summary.reward.name;
  const cell = (t, run) => (t ? [listLink(run, { task: t.id }, `${t.episodes} ep`), `, mean ${fmt(t.reward_mean)}`] : "–");
  const delta = (x, y) => (x && y && x.reward_mean !== null && y.reward_mean !== null ? fmt(y.reward_mean - x.reward_mean) : "–");
  m.append(el("p", {}, "A: ", volatile(ra.dir), el("br"), "B: ", volatile(rb.dir)), table(["", "A", "B"], [
    ["status", ra.summary.status, rb.summary.status], ["episodes", String(ra.summary.episodes), String(rb.summary.episodes)],
    [`${name} mean`, fmt(ra.summary.reward.mean), fmt(rb.summary.reward.mean)],
    ["exit reasons", exits(a, "", ra.summary.by_exit_reason), exits(b, "", rb.summary.by_exit_reason)],
    ["policy", ra.summary.policy ? ra.summary.policy.name : "–", rb.summary.policy ? rb.summary.policy.name : "–"],
    ["provider", ra.summary.provider ? ra.summary.provider.name : "–", rb.summary.provider ? rb.summary.provider.name : "–"],
  ]));
  m.append(el("h2", {}, `By task (${name})`), el("table", { id: "compare-tasks" }, el("tr", {}, ["task", "A", "B", "B − A"].map((h) => el("th", {}, h))),
    [...byTask.keys()].sort().map((k) => { const [x, y] = byTask.get(k); return el("tr", {}, el("td", {}, k), el("td", {}, cell(x, a)), el("td", {}, cell(y, b)), el("td", { class: "num" }, delta(x, y))); })));
  m.append(el("div", { class: "cols" }, el("div", {}, el("h2", {}, "A"), histogram(a, ra.summary.reward)), el("div", {}, el("h2", {}, "B"), histogram(b, rb.summary.reward))));
}

// ---- the router

async function route() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  const parts = path.split("/").filter(Boolean);
  document.body.dataset.ready = "";
  try {
    if (parts[0] === "run" && parts.length === 2) await pageRun(parts[1]);
    else if (parts[0] === "run" && parts[2] === "episodes") await pageEpisodes(parts[1], new URLSearchParams(query || ""));
    else if (parts[0] === "run" && parts[2] === "episode") await pageEpisode(parts[1], decodeURIComponent(parts[3]));
    else if (parts[0] === "compare") await pageCompare(parts[1], parts[2]);
    else await pageRuns();
  } catch (err) {
    main().replaceChildren(el("p", { class: "error", id: "error" }, String(err.message || err)));
  }
  document.body.dataset.ready = h;
}

window.addEventListener("hashchange", route);
route();
