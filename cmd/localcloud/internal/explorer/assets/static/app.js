// localcloud explorer: live counts, the activity feed and the forms.
// Plain JS, no build step, no network access beyond the explorer itself.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;

  function fmtAge(ms) {
    if (ms <= 0) return "-";
    if (ms < 1000) return ms + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    const m = Math.floor(ms / 60000), s = Math.floor(ms / 1000) % 60;
    if (ms < 3600000) return m + "m" + String(s).padStart(2, "0") + "s";
    return Math.floor(ms / 3600000) + "h" + String(m % 60).padStart(2, "0") + "m";
  }

  // Ages tick on their own between updates.
  function tickAges() {
    const now = Date.now();
    document.querySelectorAll("[data-oldest]").forEach(el => {
      const t = Number(el.dataset.oldest);
      el.textContent = t > 0 ? fmtAge(now - t) : "-";
    });
  }
  setInterval(tickAges, 1000);

  function setField(scope, f, v) {
    scope.querySelectorAll('[data-f="' + f + '"]').forEach(el => {
      if (el.textContent !== String(v)) {
        el.textContent = String(v);
        el.classList.remove("flash"); void el.offsetWidth; el.classList.add("flash");
      }
    });
  }

  function applyStats(b) {
    document.querySelectorAll('[data-binding="' + CSS.escape(b.name) + '"]').forEach(scope => {
      const h = scope.querySelector('[data-f="health"]');
      if (h) { setField(scope, "health", b.health); h.className = b.health === "ok" ? "ok" : "bad"; }
      if (b.queue) {
        for (const f of ["due", "delayed", "inFlight", "deadLetters"]) setField(scope, f, b.queue[f]);
        scope.querySelectorAll('[data-f="oldest"]').forEach(el => { el.dataset.oldest = b.queue.oldest; });
      }
      if (b.kv) { setField(scope, "live", b.kv.live); setField(scope, "expired", b.kv.expired); }
    });
    tickAges();
  }

  // The activity table.
  const table = document.querySelector("#activity tbody");
  let paused = false, held = [];
  const pauseBtn = document.getElementById("pause");
  const showHints = document.getElementById("show-hints");
  function addRow(e) {
    if (e.kind === "hint" && showHints && !showHints.checked) return;
    const tr = document.createElement("tr");
    tr.className = "ev " + e.kind;
    tr.dataset.at = e.at;
    if (e.binding) tr.dataset.binding = e.binding;
    const cells = [new Date(e.at).toLocaleTimeString(undefined, {hour12: false}) + "." + String(e.at % 1000).padStart(3, "0"), e.kind, e.binding || "", e.text];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    table.insertBefore(tr, table.firstChild);
    while (table.rows.length > 500) table.deleteRow(table.rows.length - 1);
  }
  if (pauseBtn) pauseBtn.addEventListener("click", () => {
    paused = !paused;
    pauseBtn.textContent = paused ? "Resume" : "Pause";
    document.getElementById("paused-note").textContent = paused ? "paused: new events are held" : "";
    if (!paused) { held.forEach(addRow); held = []; }
  });

  if (document.body.dataset.live) {
    const live = document.getElementById("live");
    const es = new EventSource("/api/events");
    es.onopen = () => { live.textContent = "live"; live.className = "live on"; };
    es.onerror = () => { live.textContent = "reconnecting"; live.className = "live off"; };
    es.onmessage = msg => {
      const e = JSON.parse(msg.data);
      if (e.kind === "stats") { if (e.stats) applyStats(e.stats); return; }
      if (!table) return;
      if (paused) held.push(e); else addRow(e);
    };
  }

  // Typed confirmations: the button stays off until the input matches.
  document.querySelectorAll("input[data-must]").forEach(inp => {
    const btn = inp.form.querySelector("button[type=submit]");
    inp.addEventListener("input", () => { btn.disabled = inp.value !== inp.dataset.must; });
  });

  // KV value views.
  document.querySelectorAll('input[name="view"]').forEach(r => r.addEventListener("change", () => {
    document.querySelectorAll("pre.view").forEach(p => { p.hidden = p.dataset.view !== r.value; });
  }));

  // Forms post JSON to the API with the CSRF token, then reload the page.
  document.querySelectorAll("form[data-api]").forEach(form => form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const out = form.querySelector("output");
    const body = {};
    for (const el of form.elements) {
      if (!el.name || el.name === "view") continue;
      if (el.type === "checkbox") body[el.name] = el.checked;
      else if (el.type === "radio") { if (el.checked) body[el.name] = el.value; }
      else body[el.name] = el.value;
    }
    const btn = form.querySelector("button[type=submit]");
    if (btn) btn.disabled = true;
    try {
      const res = await fetch(form.dataset.api, {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify(body),
      });
      const data = await res.json();
      if (!res.ok) throw new Error(data.error || res.statusText);
      out.className = "done";
      out.textContent = "done: " + JSON.stringify(data);
      setTimeout(() => { if (form.dataset.then) location.href = form.dataset.then; else location.reload(); }, 300);
    } catch (err) {
      out.className = "error";
      out.textContent = err.message;
      if (btn) btn.disabled = false;
    }
  }));
})();
