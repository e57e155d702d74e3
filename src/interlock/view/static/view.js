// interlock view: the chart with a run on it, live over server-sent events. No dependencies.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const FINALS = new Set(["finished", "failed", "interrupted"]);
  const STOPS = new Set(["interrupt", "preempt"]);
  const run = { id: null, events: [], metrics: [], checkpoints: [], source: null };
  let info = { ids: {}, guards: {} };
  let nodes = {};  // state path -> <g class="node">
  let svg = null, view = null, full = null;

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const fmt = (v) => typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v);

  // -- the chart: one region at a time, one level deep, pan and zoom ---------------------------
  // The page opens on the overview (the top level, each region a box); a click on a box opens that
  // region, the breadcrumb goes back up. Every drawing is `interlock chart --region R --depth 1`.
  let region = null, regions = new Set(), drawings = new Map(), tracking = false, opening = null;
  const regionOf = (path) => {  // the region a state is drawn in: its parent (null: the top level)
    const i = path ? path.lastIndexOf(".") : -1;
    return i < 0 ? null : path.slice(0, i);
  };
  const focusOf = (s) => s.failedIn || (s.error ? null : s.stoppedIn) || s.current;  // where the run is (or ended)
  const shownAs = (path) => {  // the drawn node standing for a state: itself, or the box holding it
    for (let p = path; p; p = regionOf(p)) if (nodes[p]) return p;
    return null;
  };

  async function loadChart(id) {
    info = await (await fetch(`/api/chart.json?run=${encodeURIComponent(id)}`)).json();
    regions = new Set(info.regions || []);
    drawings = new Map(); region = null; tracking = false;
    await openRegion(null);
  }

  function openRegion(r) {  // one drawing at a time: a request while one loads waits for it
    opening = (opening || Promise.resolve()).then(() => drawRegion(r)).finally(() => { opening = null; });
    return opening;
  }

  async function drawRegion(r) {
    if (r === region && svg && drawings.has(`${run.id || ""}|${r || ""}`)) return;
    const key = `${run.id || ""}|${r || ""}`;
    let text = drawings.get(key);
    if (text === undefined) {
      const q = `?run=${encodeURIComponent(run.pending || run.id)}&depth=1` + (r ? `&region=${encodeURIComponent(r)}` : "");
      const res = await fetch(`/api/chart.svg${q}`);
      if (!res.ok) { svg = view = null; $("chart").innerHTML = `<p class="muted">${esc(await res.text())}</p>`; return; }
      text = await res.text(); drawings.set(key, text);
    }
    region = r; nodes = {};
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    svg = document.importNode(doc.documentElement, true);
    svg.removeAttribute("width"); svg.removeAttribute("height");
    $("chart").replaceChildren(svg);
    const byTitle = {};
    for (const g of svg.querySelectorAll("g.node")) {
      const t = g.querySelector("title"); if (t) byTitle[t.textContent] = g;
    }
    for (const [path, id] of Object.entries(info.ids)) if (byTitle[id]) {
      const g = byTitle[id]; nodes[path] = g; g.dataset.state = path;
      if (regions.has(path)) { g.classList.add("iv-region"); g.setAttribute("role", "button"); }
    }
    const vb = svg.viewBox.baseVal;
    full = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    view = { ...full };
    crumbs();
    if (run.events.length) draw();
  }

  function crumbs() {
    const parts = [`<button class="crumb" data-region="">chart</button>`];
    if (region) {
      const names = region.split(".");
      names.forEach((name, i) => parts.push(`<button class="crumb" data-region="${esc(names.slice(0, i + 1).join("."))}">${esc(name)}</button>`));
    }
    const now = run.events.length ? regionOf(focusOf(where(pos()))) : null;
    const here = now !== null && now !== region ? ` <button id="now" data-region="${esc(now)}" title="open the region the run is in">now: ${esc(now)}</button>` : "";
    $("crumbs").innerHTML = parts.join(" › ") + here;
  }

  function setView(v) { view = v; svg.setAttribute("viewBox", `${v.x} ${v.y} ${v.w} ${v.h}`); }
  function zoom(f, cx, cy) {
    if (!view) return;
    const w = Math.min(full.w * 2, Math.max(full.w / 40, view.w * f)), k = w / view.w;
    cx = cx ?? view.x + view.w / 2; cy = cy ?? view.y + view.h / 2;
    setView({ x: cx - (cx - view.x) * k, y: cy - (cy - view.y) * k, w, h: view.h * k });
  }
  function toChart(ev) {
    if (!svg) return { x: 0, y: 0 };
    const p = svg.createSVGPoint(); p.x = ev.clientX; p.y = ev.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  }
  function centreOn(path) {
    const g = nodes[path]; if (!g || !view) return;
    const b = g.getBBox(), m = g.getCTM(), r = svg.getCTM();
    const toRoot = r.inverse().multiply(m);
    const p = svg.createSVGPoint(); p.x = b.x + b.width / 2; p.y = b.y + b.height / 2;
    const c = p.matrixTransform(toRoot);
    const w = Math.min(view.w, full.w / 3), h = view.h * (w / view.w);
    setView({ x: c.x - w / 2, y: c.y - h / 2, w, h });
  }
  function panZoom() {
    const box = $("chart");
    box.addEventListener("wheel", (ev) => { ev.preventDefault(); const p = toChart(ev); zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y); }, { passive: false });
    let drag = null;
    box.addEventListener("pointerdown", (ev) => { drag = { p: toChart(ev), x: ev.clientX, y: ev.clientY }; box.setPointerCapture(ev.pointerId); });
    box.addEventListener("pointermove", (ev) => {
      if (!drag || !view) return;
      const p = toChart(ev);
      setView({ ...view, x: view.x - (p.x - drag.p.x), y: view.y - (p.y - drag.p.y) });
    });
    box.addEventListener("pointerup", (ev) => {
      const still = drag && Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) < 4;
      drag = null;
      if (!still) return;
      const hit = document.elementFromPoint(ev.clientX, ev.clientY);
      const g = hit && hit.closest ? hit.closest("g.node.iv-region") : null;
      if (g) { tracking = false; openRegion(g.dataset.state); }  // a click on a region's box opens it
    });
    $("crumbs").addEventListener("click", (ev) => {
      const b = ev.target.closest ? ev.target.closest("button") : null;
      if (!b) return;
      tracking = b.id === "now";  // "now" follows the run from region to region; a crumb stays put
      openRegion(b.dataset.region || null);
    });
    $("zoom-in").onclick = () => zoom(1 / 1.4);
    $("zoom-out").onclick = () => zoom(1.4);
    $("zoom-fit").onclick = () => setView({ ...full });
    $("zoom-current").onclick = async () => {
      const at = focusOf(where(pos())); if (!at) return;
      tracking = true;
      if (regionOf(at) !== region) await openRegion(regionOf(at));
      centreOn(at);
    };
  }

  // -- where the run was after the first n events -----------------------------------------
  function where(n) {
    const visits = {}, taken = {};
    let current = null, error = null, failedIn = null, failedWhere = null, stoppedIn = null, stoppedBy = null, prev = null;
    let number = 0, failNumber = 0;  // transitions so far (a repeat's turns counted), the one the run failed after
    for (let i = 0; i < n; i++) {
      const e = run.events[i];
      if (i === 0) visits[e.source] = 1;
      number += e.cycle ? e.times * e.cycle.length : 1;
      if (e.cycle) {  // a compact trace's repeat: the loop's transitions, each taken e.times times
        for (const c of e.cycle) {
          visits[c.event] = (visits[c.event] || 0) + e.times;
          const k = `${c.source}|${c.trigger}|${c.event}`;
          taken[k] = (taken[k] || 0) + e.times;
        }
        prev = e.trigger; current = e.event;
        continue;
      }
      visits[e.event] = (visits[e.event] || 0) + 1;
      const key = `${e.source}|${e.trigger}|${e.event}`;
      taken[key] = (taken[key] || 0) + 1;
      if (FINALS.has(e.source)) { error = failedIn = failedWhere = stoppedIn = stoppedBy = null; failNumber = 0; }
      if (STOPS.has(e.trigger)) { stoppedIn = e.source; stoppedBy = e.trigger; }
      if (e.trigger === "fail") failNumber = number - 1;
      if (e.trigger === "fail" || (e.error != null && prev !== "fail")) failedIn = e.source;
      if (e.error != null) { error = String(e.error); if (e.where != null) failedWhere = String(e.where); }
      prev = e.trigger; current = e.event;
    }
    return { visits, taken, current, error, failedIn, failedWhere, stoppedIn, stoppedBy, number, failNumber, last: n ? run.events[n - 1] : null };
  }
  // the one line that replays this run to transition k (the CLI's for a run of `interlock fit`, else the Python call)
  function replayCommand(k) {
    const r = run.replay;
    if (!r || !k) return "";
    return r.cli ? `interlock replay ${r.run_dir} --to ${k}` : `interlock.replay(${JSON.stringify(r.run_dir)}, module, train_data, val_data, to=${k})`;
  }
  const pos = () => Number($("scrub").value);

  function badge(g, n) {
    let t = g.querySelector("text.iv-count");
    if (!t) {
      const b = g.getBBox();
      t = document.createElementNS(SVGNS, "text");
      t.setAttribute("class", "iv-count"); t.setAttribute("x", b.x + b.width - 2); t.setAttribute("y", b.y - 2);
      t.setAttribute("text-anchor", "end"); g.appendChild(t);
    }
    t.textContent = n ? `×${n}` : "";
  }

  function draw() {
    const n = pos(), s = where(n);
    const at = focusOf(s);
    if (tracking && at && regionOf(at) !== region && !opening) openRegion(regionOf(at));  // redraws when drawn
    const cur = s.current && !s.failedIn ? shownAs(s.current) : null, bad = s.failedIn ? shownAs(s.failedIn) : null;
    const stop = s.stoppedIn && !s.error ? shownAs(s.stoppedIn) : null, seen = {};
    for (const p of Object.keys(s.visits)) { const at = shownAs(p); if (at) seen[at] = true; }
    for (const [path, g] of Object.entries(nodes)) {
      g.classList.toggle("iv-visited", !!seen[path]);
      g.classList.toggle("iv-current", path === cur);
      g.classList.toggle("iv-failed", path === bad);
      g.classList.toggle("iv-interrupted", path === stop);
      const count = s.visits[path] || 0;  // a leaf's visits (a region's box is marked, not counted)
      if (count || g.querySelector("text.iv-count")) badge(g, count);
    }
    const status = !s.last ? "no events" : FINALS.has(s.current) ? s.current : "running";
    $("status").textContent = status; $("status").className = `badge ${status}`;
    const out = $("outcome");
    if (s.error || (s.stoppedIn && !s.error)) {
      out.hidden = false;
      out.className = s.error ? "failed" : "interrupted";
      out.textContent = s.error ? `failed in ${s.failedWhere || s.failedIn}: ${s.error}` + (s.failNumber ? `\nreproduce it: ${replayCommand(s.failNumber)}` : "") : `${s.stoppedBy === "preempt" ? "preempted" : "interrupted"} in ${s.stoppedIn}`;
    } else out.hidden = true;
    const e = s.last;
    const what = e && e.cycle ? `a loop ×${e.times} (${e.cycle.length} transitions each) to ${e.event}` : e ? `${e.source} —${e.trigger}→ ${e.event}` : "";
    $("moment").textContent = e ? `event ${n}/${run.events.length}, transition ${s.number}: ${what} · epoch ${e.epoch} step ${e.global_step}` + (e.time ? ` · ${new Date(e.time * 1000).toLocaleTimeString()}` : "") : "start";
    $("replay").textContent = replayCommand(s.number);
    $("replay").hidden = !s.number;
    $("current").innerHTML = e ? `<code id="current-state">${esc(s.current)}</code> · epoch ${esc(e.epoch)} · step ${esc(e.global_step)}` : "—";
    const rows = Object.entries(s.taken).sort((a, b) => b[1] - a[1]).map(([k, c]) => {
      const [src, trig, dst] = k.split("|"), guard = info.guards[`${src}|${trig}`];
      return `<tr><td><code>${esc(src)}</code> —${esc(trig)}${guard ? ` <b>[${esc(guard)}]</b>` : ""}→ <code>${esc(dst)}</code></td><td class="n">×${c}</td></tr>`;
    });
    $("transitions").innerHTML = rows.join("");
    crumbs();
  }

  // -- metrics and checkpoints ----------------------------------------------------------
  function plots() {
    const x = $("xaxis").value, names = [];
    for (const r of run.metrics) for (const k of Object.keys(r)) if (!["stage", "epoch", "global_step"].includes(k) && typeof r[k] === "number" && !names.includes(k)) names.push(k);
    if (!names.length) return;
    const W = 380, H = 120, L = 44, B = 16;
    $("plots").innerHTML = names.map((name) => {
      const pts = run.metrics.filter((r) => typeof r[name] === "number" && typeof r[x] === "number").map((r) => [r[x], r[name]]);
      if (!pts.length) return "";
      const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
      const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
      const sx = (v) => L + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * (W - L - 6);
      const sy = (v) => 6 + (y1 > y0 ? 1 - (v - y0) / (y1 - y0) : 0.5) * (H - B - 12);
      const d = pts.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
      return `<svg class="plot" data-metric="${esc(name)}" viewBox="0 0 ${W} ${H}"><text x="${L}" y="10">${esc(name)}</text>` +
        `<line class="axis" x1="${L}" y1="${H - B}" x2="${W}" y2="${H - B}"/><line class="axis" x1="${L}" y1="0" x2="${L}" y2="${H - B}"/>` +
        `<text x="2" y="12">${fmt(y1)}</text><text x="2" y="${H - B}">${fmt(y0)}</text>` +
        `<text x="${L}" y="${H - 2}">${x === "epoch" ? "epoch" : "step"} ${fmt(x0)}</text><text x="${W - 4}" y="${H - 2}" text-anchor="end">${fmt(x1)}</text>` +
        `<polyline class="line" points="${d}"/>` + pts.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5"><title>${esc(name)} ${fmt(p[1])} @ ${x} ${fmt(p[0])}</title></circle>`).join("") + "</svg>";
    }).join("");
  }

  function checkpoints() {
    if (!run.checkpoints.length) { $("checkpoints").innerHTML = '<p class="muted">none yet</p>'; return; }
    $("checkpoints").innerHTML = run.checkpoints.map((c) => {
      const m = Object.entries(c.metrics || {}).map(([k, v]) => `${esc(k)}=${esc(fmt(v))}`).join(" ");
      const head = c.error ? `<span class="muted">${esc(c.error)}</span>` : `state <code>${esc(c.chart)}</code> · epoch ${esc(c.epoch)} · step ${esc(c.global_step)}<br><span class="muted">${m}</span>`;
      const kind = c.sharded ? ' <span class="muted">(sharded directory)</span>' : "";
      return `<div class="ckpt" data-name="${esc(c.name)}"><b>${esc(c.name)}</b>${kind}<br>${head}<code class="resume">${esc(c.resume)}</code></div>`;
    }).join("");
  }

  // -- the run, live ----------------------------------------------------------------------
  function setScrub() {
    const s = $("scrub"), follow = $("follow").checked;
    s.max = String(run.events.length);
    if (follow) s.value = String(run.events.length);
  }
  function apply(data) {
    if (data.events) run.events.push(...data.events);
    if (data.metrics) { run.metrics = data.metrics; plots(); }
    if (data.checkpoints) { run.checkpoints = data.checkpoints; checkpoints(); }
    if (data.replay) run.replay = data.replay;
    setScrub(); draw();
  }
  async function open(id) {
    if (run.source) { run.source.close(); run.source = null; }
    Object.assign(run, { id, pending: id, events: [], metrics: [], checkpoints: [], replay: null });
    await loadChart(id);  // the chart this run ran (a custom one when it was trained with one), its overview first
    $("plots").innerHTML = '<p class="muted">no metrics.csv yet</p>';
    const url = new URL(location.href); url.searchParams.set("run", id); history.replaceState(null, "", url);
    const src = new EventSource(`/api/stream?run=${encodeURIComponent(id)}`);
    src.addEventListener("snapshot", (ev) => {
      run.events = []; apply(JSON.parse(ev.data)); $("live").textContent = "live";
    });
    src.addEventListener("update", (ev) => apply(JSON.parse(ev.data)));
    src.onerror = () => { $("live").textContent = "reconnecting"; };
    run.source = src;
  }

  async function main() {
    $("scrub").addEventListener("input", () => { $("follow").checked = pos() === run.events.length; draw(); });
    $("follow").addEventListener("change", () => { setScrub(); draw(); });
    $("xaxis").addEventListener("change", plots);
    panZoom();
    const listing = await (await fetch("/api/runs")).json();
    const sel = $("runs");
    sel.innerHTML = listing.runs.map((r) => `<option value="${esc(r)}">${esc(r === "." ? listing.root : r)}</option>`).join("");
    const wanted = new URL(location.href).searchParams.get("run") || listing.open || listing.runs[0];
    if (wanted && wanted === listing.open && !listing.runs.includes(wanted)) {  // a run that has not written yet
      listing.runs.unshift(wanted);
      sel.insertAdjacentHTML("afterbegin", `<option value="${esc(wanted)}">${esc(wanted)}</option>`);
    }
    if (wanted && listing.runs.includes(wanted)) { sel.value = wanted; open(wanted); }
    else $("status").textContent = listing.runs.length ? "pick a run" : `no runs under ${listing.root}`;
    sel.addEventListener("change", () => open(sel.value));
  }
  main();
})();
