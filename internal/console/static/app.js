// The operator console: fetch /ui/api/state every second and redraw.
// Everything is written with textContent (never HTML from the data).
"use strict";

const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
const colours = new Map();
function colour(region) {
  if (!colours.has(region)) colours.set(region, palette[colours.size % palette.length]);
  return colours.get(region);
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function ms(v) {
  if (v === undefined || v === null || v < 0) return "–";
  return v < 1000 ? v + " ms" : (v / 1000).toFixed(1) + " s";
}

function clock(t) {
  if (!t) return "–";
  const d = new Date(t);
  return isNaN(d) || d.getFullYear() < 2000 ? "–" : d.toISOString().substring(11, 23);
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function drawRegions(regions) {
  const body = document.querySelector("#regions tbody");
  body.replaceChildren();
  for (const r of regions) {
    const lease = el("td");
    if (!r.live) lease.appendChild(el("span", "no lease", "bad"));
    else if (r.detailed && !r.leaseOk) lease.appendChild(el("span", "unproven " + ms(r.leaseAgeMs), "bad"));
    else lease.appendChild(el("span", r.detailed ? "ok " + ms(r.leaseAgeMs) : "ok", "ok"));
    if (r.draining) lease.appendChild(el("span", " draining", "warn"));
    if (r.leaseError) lease.title = r.leaseError;
    const asOf = el("td", r.detailed ? clock(r.asOf) + " (" + ms(r.stalenessMs) + ")" : "–");
    if (r.detailed && r.stalenessMs > 5000) asOf.className = "bad";
    const wms = el("td");
    for (const [name, t] of Object.entries(r.watermarks || {}).sort()) wms.appendChild(el("div", name + ": " + clock(t)));
    const peers = el("td");
    for (const p of r.peers || []) {
      const d = el("div", p.region + ": " + p.lagEvents + " events, " + ms(p.lagMs) + (p.active ? "" : " (inactive)"));
      if (!p.active || !p.handshaken) d.className = "warn";
      peers.appendChild(d);
    }
    const name = el("td", r.name);
    name.style.borderLeft = "6px solid " + colour(r.name);
    if (r.error) name.appendChild(el("div", r.error, "bad"));
    const tr = row([name, lease, asOf, wms,
      r.detailed ? r.aggregatorLagEvents + " events" + (r.relayLagEvents !== undefined ? ", relay " + r.relayLagEvents : "") : "–",
      peers, r.pinsOwned, r.pinsCatchingUp]);
    tr.id = "region-" + r.name;
    body.appendChild(tr);
  }
}

function drawPins(pins) {
  const grid = document.getElementById("pin-grid");
  const body = document.querySelector("#pins tbody");
  grid.replaceChildren();
  body.replaceChildren();
  let away = 0, catching = 0;
  for (const p of pins) {
    const state = p.catchingUp ? "catching up" : (p.home && p.home !== p.region ? "away from home" : "home");
    if (p.catchingUp) catching++;
    if (p.home && p.home !== p.region) away++;
    const cell = el("span", p.range + " " + p.region);
    cell.style.background = colour(p.region);
    cell.title = "range " + p.range + ": " + p.region + ", epoch " + p.epoch + ", home " + p.home + ", " + state;
    if (p.home && p.home !== p.region) cell.classList.add("away");
    if (p.catchingUp) cell.classList.add("catching");
    grid.appendChild(cell);
    const tr = row([p.range, el("td", p.region, "region"), el("td", p.epoch, "epoch"), el("td", p.home || "?", "home"),
      el("td", state, p.catchingUp ? "state warn" : "state"), clock(p.notBefore)]);
    tr.id = "pin-" + p.range;
    body.appendChild(tr);
  }
  document.getElementById("pin-summary").textContent =
    pins.length ? "(" + pins.length + " ranges, " + away + " away from home, " + catching + " catching up)" : "(no cluster)";
}

function drawEvents(events) {
  const ul = document.getElementById("events");
  ul.replaceChildren();
  if (!events.length) ul.appendChild(el("li", "none seen since this process started", "none"));
  for (const e of events) {
    let text = clock(e.time) + " range " + e.range + ": ";
    if (e.kind === "caught-up") text += e.to + " caught up (epoch " + e.epoch + ")";
    else text += e.from + " → " + e.to + " (epoch " + e.epoch + ", " + e.kind + (e.planned ? ", planned" : "") + ")";
    const li = el("li", text, "event " + e.kind);
    li.dataset.range = e.range;
    li.dataset.to = e.to;
    li.dataset.epoch = e.epoch;
    ul.appendChild(li);
  }
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const res = await fetch("api/state", { cache: "no-store" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    const s = await res.json();
    drawRegions(s.regions);
    drawPins(s.pins);
    drawEvents(s.events);
    const errs = document.getElementById("errors");
    errs.replaceChildren();
    for (const e of s.errors || []) errs.appendChild(el("div", e));
    status.textContent = "updated " + clock(s.now);
    status.className = "ok";
    document.body.dataset.loaded = "1";
    document.body.dataset.polled = s.polled;
  } catch (err) {
    status.textContent = "cannot reach likesd: " + err.message;
    status.className = "bad";
  }
}

refresh();
setInterval(refresh, 1000);
