"use strict";
// The organiser console: renders the director's status (pushed by
// /api/events) and sends controls to /api/control with the page's CSRF token.
// Plain DOM, no framework; every text goes through textContent (team names
// come from the teams).
(() => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const ACTIONS = JSON.parse(document.getElementById("actions").textContent);
  const $ = (id) => document.getElementById(id);
  let status = null;
  window.salvoConsole = { updates: 0 };

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : String(kid));
    }
    return e;
  }

  // A control button: data-action and data-args carry what is sent;
  // data-ask asks first (a reason, a winner) in the dialog.
  function control(label, action, args, opts = {}) {
    return h("button", {
      type: "button",
      class: opts.cls || "small",
      "data-action": action,
      "data-args": JSON.stringify(args || {}),
      "data-ask": opts.ask || null,
      disabled: opts.disabled || false,
      title: ACTIONS[action] ? ACTIONS[action].help : null,
    }, label);
  }

  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
  const clock = (ts) => new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
  function ago(ts) {
    const s = Math.max(0, Math.floor(Date.now() / 1000 - ts));
    return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
  }
  function table(head, rows, empty, cls) {
    if (!rows.length) return h("p", { class: "empty box" }, empty);
    return h("div", { class: "scroll" }, h("table", { class: cls || null },
      h("thead", {}, h("tr", {}, head.map(([t, c]) => h("th", { class: c || null }, t)))),
      h("tbody", {}, rows)));
  }
  function fill(id, ...kids) { $(id).replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined)); }

  function renderHeader(t) {
    if (!t) { fill("tournament", h("span", { class: "muted" }, "No tournament running.")); fill("pause-all"); return; }
    const format = t.format === "swiss" ? "Swiss" : "Round-robin";
    fill("tournament",
      h("span", {}, h("b", {}, format), t.table_size > 2 ? ` · tables of ${t.table_size}` : ""),
      h("span", { id: "t-round" }, "Round ", h("b", {}, t.round), " of ", h("b", {}, t.rounds)),
      h("span", { id: "t-games" }, h("b", {}, t.games_played), ` of ${t.games_total} games played · `,
        h("b", {}, t.games_left), " left"),
      t.leader ? h("span", { id: "t-leader" }, "Leader: ", h("b", {}, t.leader)) : null,
      t.paused ? h("span", { class: "badge paused", id: "t-paused" }, "Paused") : null,
      t.done ? h("span", { class: "badge done" }, "Finished") : null);
    fill("pause-all", t.done ? null : t.paused
      ? control("Resume tournament", "resume", {}, { cls: "primary" })
      : control("Pause tournament", "pause", {}, { cls: "warn" }));
  }

  const LIVE = new Set(["lobby", "placement", "turn"]);
  function renderArenas(arenas) {
    if (!arenas.length) { fill("arenas", h("p", { class: "empty box" }, "No arenas yet.")); return; }
    fill("arenas", arenas.map((a) => {
      const live = LIVE.has(a.state);
      const teams = a.teams.length
        ? a.teams.flatMap((t, i) => [i ? " vs " : "", h("span", { class: t === a.current ? "current" : null }, t)])
        : [h("span", { class: "muted" }, "no game")];
      const meta = [
        a.round !== null && a.round !== undefined ? `Round ${a.round}` : null,
        a.turn ? `Turn ${a.turn}` : null,
        a.current ? `${a.current} to fire` : null,
      ].filter(Boolean);
      const args = { arena: a.arena };
      return h("article", { class: `arena state-${a.state}` + (a.paused ? " paused" : ""), "data-arena": a.arena },
        h("header", {},
          h("h3", {}, a.arena),
          h("span", { class: `badge state ${a.state}` }, a.state),
          a.paused ? h("span", { class: "badge paused" }, "Paused") : null),
        h("p", { class: "teams" }, teams),
        h("p", { class: "meta" }, meta.join(" · "),
          a.since ? [meta.length ? " · for " : "for ", h("span", { class: "since", "data-since": a.since }, ago(a.since))]
            : null),
        live ? h("div", { class: "buttons" },
          a.paused
            ? control("Resume", "resume-game", args, { cls: "primary" })
            : control("Pause", "pause-game", args, { cls: "warn" }),
          control("+60 s", "extra-time", { ...args, seconds: 60 }, { cls: "" }),
          control("Abort…", "abort-game", args, { cls: "danger", ask: "reason" }))
          : h("div", { class: "buttons" }, control("Clear…", "clear-arena", args, { cls: "danger", ask: "reason" })));
    }));
  }

  function renderStandings(rows, swiss) {
    const head = [["#", "num"], ["Team"], ["Played", "num"], ["W", "num"], ["D", "num"], ["L", "num"],
      ["Forfeits", "num"], ["Points", "num"]];
    if (swiss) head.push(["Buchholz", "num"]);
    head.push(["Hits / shots", "num"], ["Accuracy", "num"], [""]);
    fill("standings", table(head, rows.map((r) => h("tr", { class: r.withdrawn ? "withdrawn" : null, "data-team": r.team },
      h("td", { class: "num" }, r.rank), h("td", { class: "team" }, r.team),
      h("td", { class: "num" }, r.played), h("td", { class: "num" }, r.wins), h("td", { class: "num" }, r.draws),
      h("td", { class: "num" }, r.losses), h("td", { class: "num" }, r.forfeits), h("td", { class: "num" }, h("b", {}, r.points)),
      swiss ? h("td", { class: "num" }, r.buchholz) : null,
      h("td", { class: "num" }, `${r.hits} / ${r.shots}`), h("td", { class: "num" }, pct(r.accuracy)),
      h("td", { class: "actions" }, r.withdrawn ? h("span", { class: "badge withdrawn" }, "Withdrawn")
        : control("Withdraw…", "withdraw", { team: r.team }, { cls: "small quiet", ask: "reason" })))),
    "No teams yet."));
  }

  const RESULT = new Set(["played", "forfeit", "overridden"]);
  function renderGames(games) {
    const head = [["#", "num"], ["Round", "num"], ["Arena"], ["Teams"], ["Result"], ["Winner"], ["Turns", "num"],
      ["Time", "num"], [""]];
    const rows = [...games].reverse().map((g) => h("tr", { "data-game": g.game },
      h("td", { class: "num" }, g.game), h("td", { class: "num" }, g.round), h("td", {}, g.arena),
      h("td", {}, g.teams.join(" vs ")),
      h("td", {}, g.status, g.forfeited && g.forfeited.length ? ` (${g.forfeited.join(", ")})` : ""),
      h("td", {}, g.winner || (g.status === "played" || g.status === "overridden" ? "draw" : "–")),
      h("td", { class: "num" }, g.turns ?? "–"),
      h("td", { class: "num" }, g.duration_s === null || g.duration_s === undefined ? "–" : `${Math.round(g.duration_s)} s`),
      h("td", { class: "actions" }, RESULT.has(g.status) ? [
        control("Void…", "void-game", { game: g.game }, { cls: "small quiet", ask: "reason" }),
        control("Override…", "override", { game: g.game }, { cls: "small", ask: "override" }),
      ] : null)));
    fill("games", table(head, rows, "No game played yet."));
  }

  function renderPending(pending) {
    fill("pending", table([["Round", "num"], ["Teams"]],
      pending.map((p) => h("tr", {}, h("td", { class: "num" }, p.round), h("td", {}, p.teams.join(" vs ")))),
      "Nothing waiting."));
  }

  function renderLate(late) {
    fill("late", table([["Team"], ["Status"], [""]], late.map((l) => h("tr", { "data-late": l.team },
      h("td", {}, l.team), h("td", {}, l.status),
      h("td", { class: "actions" }, l.status === "pending" ? [
        control("Admit", "admit-late", { team: l.team }, { cls: "small primary" }),
        control("Refuse", "refuse-late", { team: l.team }, { cls: "small danger" }),
      ] : null))), "No late registrations."));
  }

  function renderAudit(audit) {
    const args = (a) => Object.entries(a || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    fill("audit", table([["Time"], ["By"], ["Action"], ["Result"]], [...audit].reverse().map((e) => h("tr", {},
      h("td", {}, clock(e.at)), h("td", {}, e.by),
      h("td", { class: "wrap" }, h("b", {}, e.action), e.args && Object.keys(e.args).length ? ` ${args(e.args)}` : ""),
      h("td", { class: "wrap" }, e.result))), "Nothing done yet."));
  }

  function render() {
    const s = status || {};
    renderHeader(s.tournament);
    renderArenas(s.arenas || []);
    renderStandings(s.standings || [], s.tournament && s.tournament.format === "swiss");
    renderGames(s.games || []);
    renderPending(s.pending || []);
    renderLate(s.late || []);
    renderAudit(s.audit || []);
    window.salvoConsole.updates += 1;
  }

  function showError(code, reason) {
    $("error").hidden = code === null;
    $("error-code").textContent = code === null ? "" : code + ":";
    $("error-reason").textContent = reason || "";
  }
  let noticeTimer = 0;
  function notice(text) {
    $("notice").textContent = text;
    $("notice").hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { $("notice").hidden = true; }, 4000);
  }
  $("error-close").addEventListener("click", () => showError(null));

  async function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body),
    });
  }

  async function send(action, args) {
    showError(null);
    let response;
    try {
      response = await post("/api/control", { action, args });
    } catch (err) {
      showError("unreachable", "the console server did not answer: " + err.message);
      return;
    }
    let body = {};
    try { body = await response.json(); } catch (_) { /* not JSON: the status says enough */ }
    if (response.status === 401) { location.reload(); return; }
    if (!response.ok) { showError(body.code || String(response.status), body.reason || response.statusText); return; }
    const what = Object.values(args).filter((v) => typeof v !== "object").join(" ");
    notice(`${action} ${what}: ${body.result || "ok"}`);
  }

  // The dialog: a reason (and for an override the winner) before a control
  // that ends or changes a result.
  function ask(action, args, kind) {
    const dialog = $("ask");
    const label = {
      "abort-game": `Abort the game in ${args.arena}?`,
      "clear-arena": `Clear ${args.arena}: send everybody there away?`,
      "void-game": `Void game ${args.game}?`,
      override: `Override the result of game ${args.game}`,
      withdraw: `Withdraw ${args.team}?`,
    }[action] || action;
    $("ask-title").textContent = label;
    $("ask-help").textContent = ACTIONS[action] ? ACTIONS[action].help : "";
    const winner = $("ask-winner");
    $("ask-winner-row").hidden = kind !== "override";
    if (kind === "override") {
      const game = ((status && status.games) || []).find((g) => g.game === args.game);
      const teams = game ? game.teams : [];
      winner.replaceChildren(...teams.map((t) => h("option", { value: t }, t)), h("option", { value: "" }, "a draw"));
    }
    const reason = $("ask-reason");
    reason.value = "";
    reason.required = true;
    return new Promise((resolve) => {
      const done = (value) => {
        $("ask-form").removeEventListener("submit", onSubmit);
        $("ask-cancel").removeEventListener("click", onCancel);
        dialog.removeEventListener("cancel", onCancel);
        if (dialog.open) dialog.close();
        resolve(value);
      };
      const onSubmit = (ev) => {
        ev.preventDefault();
        const more = { reason: reason.value.trim() };
        if (kind === "override") more.winner = winner.value;
        done(more);
      };
      const onCancel = (ev) => { ev.preventDefault(); done(null); };
      $("ask-form").addEventListener("submit", onSubmit);
      $("ask-cancel").addEventListener("click", onCancel);
      dialog.addEventListener("cancel", onCancel);
      dialog.showModal();
      reason.focus();
    });
  }

  document.addEventListener("click", async (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (!button) return;
    const action = button.dataset.action;
    let args = JSON.parse(button.dataset.args || "{}");
    if (button.dataset.ask) {
      const more = await ask(action, args, button.dataset.ask);
      if (more === null) return;
      args = { ...args, ...more };
    }
    await send(action, args);
  });

  $("logout").addEventListener("click", async () => {
    try { await post("/logout", {}); } finally { location.reload(); }
  });

  function setConn(text, cls) {
    $("conn").textContent = text;
    $("conn").className = "conn " + (cls || "");
  }

  // Is the director answering? Its stream sends the status when anything
  // changes and "alive" when nothing has for `every` seconds. A stream that
  // ended, failed, or went silent for longer than that leaves its last
  // status up, plainly marked as old (a banner, the page dimmed), never a
  // frozen night that looks normal; the next status or "alive" clears it.
  let every = 15, heard = Date.now(), stale = false, stopped = false;
  function answering() {
    heard = Date.now();
    stopped = false;
    if (stale) { stale = false; $("offline").hidden = true; document.body.classList.remove("stale"); }
    setConn("live", "live");
  }
  function notAnswering(why) {
    $("offline-why").textContent = why;
    $("offline-since").textContent = clock(heard / 1000);
    if (!stale) { stale = true; $("offline").hidden = false; document.body.classList.add("stale"); }
    setConn("not answering", "lost");
  }
  window.salvoConsole.every = () => every;  // (for tests and the curious)

  function connect() {
    const events = new EventSource("/api/events");
    events.addEventListener("status", (e) => { status = JSON.parse(e.data); render(); answering(); });
    events.addEventListener("alive", (e) => { every = Number(JSON.parse(e.data).every) || every; answering(); });
    events.addEventListener("closing", () => {
      stopped = true;
      notAnswering("It has stopped: the tournament is over, or it was stopped.");
    });
    events.addEventListener("logout", () => { events.close(); location.reload(); });
    events.addEventListener("error", async () => {
      notAnswering(stopped ? "It has stopped: the tournament is over, or it was stopped."
        : "Its connection to this page is gone.");
      if (events.readyState !== EventSource.CLOSED) return;  // the browser tries again by itself
      // Refused (not merely cut): logged out, or the server restarted.
      try {
        const r = await fetch("/api/status", { credentials: "same-origin" });
        if (r.status === 401) { location.reload(); return; }
      } catch (_) { /* down: try again below */ }
      setTimeout(connect, 2000);
    });
  }

  setInterval(() => {
    for (const e of document.querySelectorAll(".since[data-since]")) e.textContent = ago(Number(e.dataset.since));
    const silent = Date.now() - heard;
    if (!stale && silent > Math.max(1000, 2500 * every)) {
      notAnswering(`Nothing heard from it for ${Math.round(silent / 1000)} s.`);
    }
  }, 250);
  render();
  connect();
})();
