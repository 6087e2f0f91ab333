"use strict";
// The projector: a read-only spectator. `salvo spectate` reads the broker and
// streams every public message here as server-sent events (see
// salvo/web/spectate.py), so the browser needs no MQTT and nothing from the
// internet at the venue. Only public information is drawn: during a game the
// salvo rule hides which shots hit, so the boards show sunk ships, not cells;
// once the game is over its record (/game/record) is replayed on real boards.
const { el, json, plural } = Salvo;
const params = new URLSearchParams(location.search);
const PACE_MS = Math.max(100, Number(params.get("pace")) || 1600);  // one salvo of a replay
const HOLD_MS = 6000;  // the end of a replay stays up this long before it starts over
// What does not fit on the screen is shown a page at a time, the next every PAGE_MS.
const PAGE_MS = Math.max(500, (Number(params.get("page_s")) || 8) * 1000);

// -- what the page knows ---------------------------------------------------------
const arenas = new Map();  // prefix ("" for unprefixed) -> arena model
let standings = null, schedule = null;
// The server's clock minus this machine's, in seconds: deadlines say when (the
// server's Unix time), and the projector's own clock may be minutes off.
let skew = 0;
function serverNow() { return Date.now() / 1000 + skew; }
function onClock(now) { if (Number.isFinite(now)) skew = now - Date.now() / 1000; }

function fresh() {
  return { turn: null, current: "", deadline: null, salvo: null, salvos: new Map(), winner: "", lost: new Map(),
           sunkBy: new Map(), defeated: new Set(), stats: new Map(), summary: null, feed: [], record: null,
           replayAt: 0, replayNext: 0 };
}

function arena(prefix) {
  if (!arenas.has(prefix)) arenas.set(prefix, { state: "", server: "", players: [], ...fresh() });
  return arenas.get(prefix);
}

const FEED = 3, SOLO_FEED = 8;  // recent events on a card; on the only card on the screen
function note(a, line) { a.feed.unshift(line); a.feed.length = Math.min(a.feed.length, SOLO_FEED); }

// Only this game's players are news (a stale topic of another game is not).
function playing(a, name) { return !a.players.length || a.players.includes(name); }

function onMessage(topic, text) {
  const lv = topic.split("/");  // ["", prefix?, "game"|"players", ...]
  if (topic === "/tournament/standings") { standings = json(text); return render(); }
  if (topic === "/tournament/schedule") { schedule = json(text); return render(); }
  if (lv[1] === "tournament") return;
  const prefixed = lv[1] !== "game" && lv[1] !== "players";
  const prefix = prefixed ? lv[1] : "";
  const a = arena(prefix);
  const [family, ...sub] = lv.slice(prefixed ? 2 : 1);
  if (family === "game") {
    const what = sub.join("/");
    if (what === "state") {
      // Back to the lobby: a new game; nothing of the last one stays up but
      // its replay, which plays on until the next game's first turn.
      if (text === "lobby" && a.state && a.state !== "lobby") {
        const { record, replayAt, replayNext } = a;
        Object.assign(a, fresh(), { record, replayAt, replayNext });
      }
      if (text === "turn") a.record = null;  // the room watches the game now
      a.state = text;
    } else if (what === "server") a.server = text;
    else if (what === "turn") a.turn = json(text);
    else if (what === "current") a.current = text;
    else if (what === "deadline") a.deadline = json(text);
    else if (what === "salvo") {
      const s = json(text);
      if (s && !a.salvos.has(s.turn)) note(a, Salvo.salvoLine(s));
      a.salvo = s;
      if (s) a.salvos.set(s.turn, s);
    } else if (what === "winner") {
      a.winner = text;
      if (text) note(a, `${text} wins`);
    } else if (what === "record") {
      // Cleared at the reset: the replay on screen plays on (see "state").
      const r = json(text);
      if (Salvo.isRecord(r)) { a.record = r; a.replayAt = 0; a.replayNext = performance.now() + PACE_MS; }
    } else if (what === "stats/summary") a.summary = json(text);
    else if (sub[0] === "stats" && sub[1] === "players") {
      if (text) a.stats.set(sub[2], json(text)); else a.stats.delete(sub[2]);
    }
  } else if (family === "players") {
    if (sub[0] === "list") a.players = json(text) || [];
    else if (sub[1] === "defeated") {
      if (text === "true") { if (!a.defeated.has(sub[0]) && playing(a, sub[0])) note(a, `${sub[0]} is defeated`); a.defeated.add(sub[0]); }
      else a.defeated.delete(sub[0]);
    } else if (sub[1] === "ships" && sub[3] === "sunk") {
      const ships = a.lost.get(sub[0]) || new Set();
      if (text === "true" && !ships.has(sub[2])) {
        if (playing(a, sub[0])) note(a, `${sub[0]}'s ${sub[2]} sunk`);
        // Sinks follow the salvo that sank them (docs/protocol.md section 6).
        const by = a.salvo && a.salvo.player;
        if (by && by !== sub[0]) a.sunkBy.set(by, (a.sunkBy.get(by) || 0) + 1);
        ships.add(sub[2]);
      } else if (text !== "true") ships.delete(sub[2]);
      a.lost.set(sub[0], ships);
    }
  }
  render();
}

// -- drawing ---------------------------------------------------------------------
let pending = false;
function render() { if (!pending) { pending = true; requestAnimationFrame(draw); } }

// The fixture these players play, or played (its teams in schedule order and
// its round), if any: every player of the arena is in it. A game over is
// matched on its record's players among the fixtures done, a live or coming
// one among those still to play (the round may have moved on meanwhile).
function fixture(a) {
  const fixtures = schedule && Array.isArray(schedule.fixtures) ? schedule.fixtures : [];
  const finished = a.record && a.state === "over";
  const names = finished ? a.record.players : a.players;
  if (!names.length) return null;
  const found = fixtures.filter((f) => Array.isArray(f.teams) && names.every((n) => f.teams.includes(n)));
  return (finished ? found.filter((f) => f.done).pop() : found.find((f) => !f.done)) || found[0] || null;
}

function countdown(a) {
  const d = a.deadline;
  if (!d || (a.state === "over" && d.phase !== "reset")) return null;
  const label = { turn: "", placement: "placing ", reset: "next game " }[d.phase] ?? "";
  const c = el("span", { class: "countdown", "data-testid": "countdown", "data-at": d.at, "data-paused": d.paused ? "1" : "",
                         "data-left": d.left ?? "", "data-label": label });
  tick(c, serverNow());  // filled in now: the card is measured before it is shown
  return c;
}

function tick(c, now) {
  const paused = c.dataset.paused === "1";
  const left = paused ? Number(c.dataset.left) : Math.max(0, Number(c.dataset.at) - now);
  const s = Math.ceil(left), text = s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}` : `${s}s`;
  c.textContent = paused ? `PAUSED ${Number.isFinite(left) ? text : ""}`.trim() : `${c.dataset.label}${text}`;
  c.className = `countdown${paused ? " paused" : left <= 5 ? " soon" : ""}`;
}

function tickCountdowns() {
  const now = serverNow();
  for (const c of document.querySelectorAll(".countdown")) tick(c, now);
}

function headline(a) {
  const f = fixture(a);
  const teams = f ? f.teams : a.record && a.state === "over" ? a.record.players : a.players;
  const h = el("div", { class: "headline", "data-testid": "headline" });
  if (!teams.length) { h.textContent = "Waiting for teams"; return h; }
  teams.forEach((t, i) => { if (i) h.append(el("span", { class: "vs", text: " vs " })); h.append(el("span", { text: t })); });
  return h;
}

function turnLine(a) {
  const t = a.turn;
  const text = a.state === "turn" && t
    ? `Turn ${t.turn}: ${t.player} fires ${plural(t.shots, "shot")}`
    : a.state === "over" ? (t ? `Game over after turn ${t.turn}` : "Game over")
    : a.state === "lobby" ? `Lobby: ${plural(a.players.length, "player")} joined` : "";
  return el("div", { class: "turn-line" }, el("span", { "data-testid": "turn", text }), countdown(a));
}

function shotsOf(a, name) {
  const st = a.stats.get(name);
  if (st) return [st.shots, st.hits, st.ships_sunk];
  let shots = 0, hits = 0;
  for (const s of a.salvos.values()) if (s.player === name) { shots += s.shots; hits += s.hits; }
  return [shots, hits, a.sunkBy.get(name) || 0];
}

function playersTable(a) {
  const head = el("tr", {}, el("th", { text: "player" }), el("th", { text: "fleet" }),
    el("th", { class: "num", title: "ships left", text: "left" }), el("th", { class: "num", title: "ships this player sank", text: "sunk" }),
    el("th", { class: "num", text: "shots" }), el("th", { class: "num", text: "hits" }));
  const body = el("tbody");
  for (const name of a.players) {  // this game's players only
    const cls = name === a.winner ? "won" : a.defeated.has(name) ? "defeated"
              : (a.state === "turn" && name === a.current) ? "current" : "";
    const lost = a.lost.get(name) || new Set();
    const [shots, hits, sunk] = shotsOf(a, name);
    body.append(el("tr", { class: cls, "data-player": name },
      el("td", { class: "name", text: name }), el("td", {}, Salvo.fleetStrip(lost)),
      el("td", { class: "num", text: String(5 - lost.size) }), el("td", { class: "num", text: String(sunk) }),
      el("td", { class: "num", text: String(shots) }), el("td", { class: "num", text: String(hits) })));
  }
  return el("table", { class: "players" }, el("thead", {}, head), body);
}

// Every salvo of the game so far, a box per salvo with its hits, a row per
// player: public (the salvo rule tells how many hit, not which).
function salvoRows(a, keep) {
  const box = el("div", { class: "salvo-rows", "data-testid": "salvo-rows" },
                  el("div", { class: "salvo-rows-title", text: "hits, salvo by salvo" }));
  const all = [...a.salvos.values()].sort((x, y) => x.turn - y.turn);
  for (const name of a.players) {
    const mine = all.filter((s) => s.player === name).slice(-keep);
    box.append(el("div", { class: "salvo-row", "data-player": name }, el("span", { class: "name", text: name }),
      ...mine.map((s) => el("span", { class: `hits${s.hits ? " some" : ""}${s.hits >= 3 ? " many" : ""}`,
                                      title: `turn ${s.turn}: ${s.hits} of ${s.shots}`, text: String(s.hits) }))));
  }
  return box;
}

function replay(a) {
  const r = a.record, at = a.replayAt;
  const boards = Salvo.replayState(r, at);
  const s = at ? r.salvos[at - 1] : null;
  const wrap = el("div", { class: "replay", "data-testid": "replay", "data-salvo": at });
  // Once the arena moved on to its next game, the replay says whose it is.
  const whose = a.state === "over" ? "" : `${r.players.join(" vs ")} · `;
  wrap.append(el("div", { class: "salvo-line", text: `Replay · ${whose}${s ? Salvo.salvoLine(s) : "the fleets"}` }));
  // Bigger boards when this arena has the screen (nearly) to itself.
  const alone = [...arenas.values()].filter((x) => x.state).length === 1;
  const cell = `${(alone ? 40 : 26) - (r.players.length > 2 ? 10 : 0)}px`;
  const box = el("div", { class: "boards", style: `--cell:${cell}; --boards:${r.players.length}` });
  for (const name of r.players) box.append(Salvo.board(name, boards.get(name), { winner: r.winner }));
  wrap.append(box);
  return wrap;
}

function arenaCard(prefix, a) {
  const replaying = a.record && a.state !== "turn";
  // The only arena of the night, playing: bigger, with more of its story (the screen is its own).
  const shown = [...arenas.values()].filter((x) => x.state).length;
  const solo = !replaying && shown === 1;
  const roomy = !replaying && shown <= 2;  // one or two arenas: the screen has room for their story
  const card = el("article", { class: `arena${replaying ? " replaying" : solo ? " solo" : ""}${roomy ? " roomy" : ""}`,
                               "data-arena": prefix || "(default)" });
  const f = fixture(a);
  const round = f && f.round ? `round ${f.round}` : "";
  const down = a.server === "down" && a.state !== "over";
  card.append(el("div", { class: "arena-top" }, el("span", { text: prefix || "main table" }),
    el("span", { class: `badge ${a.state}`, "data-testid": "state", text: a.state || "…" }),
    replaying ? el("span", { class: "badge replay", text: "replay" }) : null,
    down ? el("span", { class: "badge down", text: "referee down" }) : null,
    round ? el("span", { text: round }) : null));
  card.append(headline(a), turnLine(a));
  if (a.winner || a.state === "over") {
    const text = a.winner ? `Winner: ${a.winner}` : (a.summary && a.summary.termination === "draw" ? "Draw" : "");
    card.append(el("div", { class: "winner", "data-testid": "winner", text }));
  }
  const s = a.salvo;
  card.append(el("div", { class: "salvo-line", "data-testid": "salvo",
                          text: s ? `Last salvo: ${s.player}, ${plural(s.hits, "hit")} of ${s.shots}` : "" }));
  card.append(playersTable(a));
  if (roomy && a.salvos.size) card.append(salvoRows(a, solo ? 14 : 7));
  const feed = el("ul", { class: "feed", "data-testid": "feed" });
  const lines = (solo || roomy ? SOLO_FEED : FEED) - (a.players.length > 2 ? 3 : 0);  // a table of 4 takes room
  for (const line of a.feed.slice(0, lines)) feed.append(el("li", { text: line }));
  if (replaying) {
    const r = replay(a);
    r.querySelector(".boards").append(feed);  // beside the boards: the card stays on the screen
    card.append(r);
  } else card.append(feed);
  return card;
}

function drawHeader() {
  document.getElementById("round").textContent = schedule && schedule.round ? `Round ${schedule.round}` : "";
  const playing = [...arenas.values()].map((a) => a.players.join(" "));
  const fixtures = schedule && Array.isArray(schedule.fixtures) ? schedule.fixtures : [];
  const next = fixtures.filter((f) => !f.done && Array.isArray(f.teams)
                               && !playing.some((p) => f.teams.every((t) => p.split(" ").includes(t))))
    .slice(0, 3).map((f) => f.teams.join(" vs "));
  document.getElementById("next").textContent = next.length ? `Next: ${next.join(" · ")}` : "";
}

function standingsRow(r, i) {
  const leads = !i && standings.games_played > 0;  // nobody leads before a game is played
  return el("tr", { "data-team": r.team, class: [r.withdrawn ? "withdrawn" : "", leads ? "top" : ""].join(" ").trim() },
    el("td", { text: String(i + 1) }),
    el("td", { class: "name" }, el("span", { text: r.team }), r.withdrawn ? el("span", { class: "note", text: " (withdrawn)" }) : null),
    ...[r.points, `${r.wins}-${r.draws}-${r.losses}`, r.forfeits ?? 0, r.buchholz ?? "–"]
      .map((v) => el("td", { class: "num", text: String(v) })));
}

let standingsShown = null;  // [standings, first row] as last drawn: measuring them again is wasted work
function drawStandings() {
  if (standingsShown && standingsShown[0] === standings && standingsShown[1] === pages.standings.start) return;
  standingsShown = [standings, pages.standings.start];
  const table = document.querySelector("#standings table");
  const rows = standings && Array.isArray(standings.table) ? standings.table : [];
  table.hidden = !rows.length;
  const played = standings ? standings.games_played : 0;
  document.getElementById("standings-note").textContent = rows.length
    ? `${standings.format}, ${plural(played, "game")} played${standings.paused ? " · PAUSED" : ""}` : "No tournament running.";
  paged(pages.standings, document.getElementById("standings-rows"), table.querySelector("tbody"),
        document.getElementById("standings-pager"), rows.length, (i) => standingsRow(rows[i], i),
        (a, b, n) => `${a}–${b} of ${n}`);
}

// The tournament is over: the room sees its champion, not stopped referees.
function drawChampion() {
  const box = document.getElementById("champion");
  const rows = standings && standings.done && Array.isArray(standings.table) ? standings.table : [];
  box.hidden = !rows.length;
  if (!rows.length) return;
  const [top, ...rest] = rows;
  box.replaceChildren(el("div", { class: "title", text: "CHAMPION" }),
    el("div", { class: "team", "data-testid": "champion-team", text: top.team }),
    el("div", { class: "line", text: `${plural(top.points, "point")} · ${top.wins}-${top.draws}-${top.losses}`
                                     + (top.buchholz !== undefined ? ` · Buchholz ${top.buchholz}` : "") }),
    el("ol", {}, ...rest.slice(0, 3).map((r, i) => el("li", { text: `${i + 2}. ${r.team} · ${plural(r.points, "point")}` }))));
}

// -- paging: the screen never scrolls ----------------------------------------------
// Each paged list shows the items from `start` on that fit in its box (at least
// one); every PAGE_MS the next page starts where this one ended.
const pages = { arenas: { start: 0, end: 0, n: 0 }, standings: { start: 0, end: 0, n: 0 } };
let flipAt = performance.now() + PAGE_MS;

function fill(box, list, start, n, make) {
  list.replaceChildren();
  let end = start;
  for (; end < n; end++) {
    const item = make(end);
    list.append(item);
    if (end > start && box.scrollHeight > box.clientHeight + 1) { item.remove(); break; }
  }
  return end;
}

// `box` is what must not overflow, `list` what the items go in (often the same).
function paged(page, box, list, pager, n, make, label) {
  pager.hidden = true;
  if (page.start >= n) page.start = 0;
  let end = fill(box, list, 0, n, make);
  if (end < n) {  // they do not all fit: a page of them, and which page it is
    pager.hidden = false;
    pager.textContent = label(1, n, n);  // the pager's height, before it is measured
    end = fill(box, list, page.start, n, make);
    pager.textContent = label(page.start + 1, end, n);
  } else page.start = 0;
  Object.assign(page, { end, n });
}

function flip() {
  for (const page of Object.values(pages)) {
    if (page.start > 0 || page.end < page.n) page.start = page.end >= page.n ? 0 : page.end;
  }
  render();
}

// Arenas with a game under way first, then the finished ones (their replays),
// then the rest; by name within each.
const RANK = { turn: 0, placement: 0, over: 1 };
function arenaOrder(a, b) {
  const ra = RANK[arenas.get(a).state] ?? 2, rb = RANK[arenas.get(b).state] ?? 2;
  return ra - rb || (a < b ? -1 : a > b ? 1 : 0);
}

function draw() {
  pending = false;
  const box = document.getElementById("arenas");
  const keys = [...arenas.keys()].filter((k) => arenas.get(k).state).sort(arenaOrder);
  paged(pages.arenas, box, box, document.getElementById("arena-pager"), keys.length,
        (i) => arenaCard(keys[i], arenas.get(keys[i])), (a, b, n) => a === b ? `arena ${a} of ${n}` : `arenas ${a}–${b} of ${n}`);
  if (!keys.length) box.replaceChildren(el("p", { class: "empty", text: "Waiting for a referee…" }));
  drawHeader(); drawStandings(); drawChampion(); tickCountdowns();
}

window.addEventListener("resize", () => { standingsShown = null; render(); });

// Replays move on at a human pace; countdowns tick; pages turn.
setInterval(() => {
  const now = performance.now();
  if (now >= flipAt) { flipAt = now + PAGE_MS; flip(); }
  // A card that grew since it was measured (a countdown one digit wider): measure again.
  for (const [box, list] of [["#arenas", "#arenas"], ["#standings-rows", "#standings tbody"]]) {
    const b = document.querySelector(box);  // (one item too big for the box stays as it is)
    if (document.querySelector(list).children.length > 1 && b.scrollHeight > b.clientHeight + 1) {
      standingsShown = null; render();
    }
  }
  for (const a of arenas.values()) {
    if (!a.record || a.state === "turn" || now < a.replayNext) continue;
    const end = a.record.salvos.length;
    a.replayAt = a.replayAt >= end ? 0 : a.replayAt + 1;
    a.replayNext = now + (a.replayAt >= end ? HOLD_MS : PACE_MS);
    render();
  }
  tickCountdowns();
}, 100);

// -- the stream ------------------------------------------------------------------
function onStatus(kind, text) {
  const c = document.getElementById("conn");
  c.className = kind; c.textContent = text;
}

// A "status" event with reset: forget everything, the whole state follows
// (a new stream, or the server's broker connection is back).
function onServerStatus(s) {
  onClock(s.now);
  if (s.reset) { arenas.clear(); standings = null; schedule = null; render(); }
  if (s.broker === "up") {
    onStatus("up", "live");
    window.salvoConnections = (window.salvoConnections || 0) + 1;  // for tests and the curious
  } else {
    onStatus("down", "the server lost the broker; retrying…");
  }
}

function listen() {
  onStatus("connecting", "connecting…");
  const events = new EventSource("events");
  events.addEventListener("status", (ev) => { const s = json(ev.data); if (s) onServerStatus(s); });
  events.addEventListener("clock", (ev) => { const c = json(ev.data); if (c) onClock(c.now); });
  events.onmessage = (ev) => { const m = json(ev.data); if (m) onMessage(m.topic, m.payload); };
  events.onerror = () => {
    onStatus("down", "lost the server; retrying…");
    // The browser retries by itself unless the stream failed for good.
    if (events.readyState === EventSource.CLOSED) setTimeout(listen, 2000);
  };
}

listen();
