"use strict";
// The replay viewer: any finished game's record (docs/protocol.md section 7)
// on boards, salvo by salvo. The record comes from ?arena=<prefix> (that
// arena's current record), from #game=<id> (a record the server has seen
// tonight), from the server itself (`salvo replay FILE`), or from a file
// dropped here. The fragment carries the game and the salvo shown, so the
// address bar is always a link to this very moment.
const { el, json, plural } = Salvo;
const BASE_MS = 1200;  // one salvo at 1x
let rec = null, at = 0, playing = null;
const $ = (id) => document.getElementById(id);

function fragment() { return new URLSearchParams(location.hash.slice(1)); }

// A record, or the last record in a JSON-lines export (a line may also hold it under "record").
function parseRecord(text) {
  const whole = json(text);
  if (Salvo.isRecord(whole)) return whole;
  if (whole && Salvo.isRecord(whole.record)) return whole.record;
  let found = null;
  for (const line of text.split("\n")) {
    const doc = json(line.trim());
    if (Salvo.isRecord(doc)) found = doc; else if (doc && Salvo.isRecord(doc.record)) found = doc.record;
  }
  return found;
}

function load(r, start) {
  rec = r;
  $("drop").hidden = true;
  $("controls").hidden = false;
  $("scrub").max = String(rec.salvos.length);
  $("title").textContent = `${rec.players.join(" vs ")}${rec.game ? ` · game ${rec.game}` : ""}`;
  show(Number.isFinite(start) ? start : 0);
}

function show(i) {
  at = Math.max(0, Math.min(rec.salvos.length, i | 0));
  const boards = Salvo.replayState(rec, at);
  $("boards").replaceChildren(...rec.players.map((n) => Salvo.board(n, boards.get(n), { winner: at === rec.salvos.length ? rec.winner : null })));
  $("boards").style.setProperty("--boards", rec.players.length);  // the boards fill the screen (spectate.css)
  $("scrub").value = String(at);
  $("position").textContent = `salvo ${at} of ${rec.salvos.length}`;
  const s = at ? rec.salvos[at - 1] : null;
  const end = at === rec.salvos.length;
  $("line").textContent = s ? Salvo.salvoLine(s) + (end && rec.winner ? ` · ${rec.winner} wins` : end && rec.termination ? ` · ${rec.termination}` : "") : "The fleets, before the first salvo";
  const f = new URLSearchParams();
  const q = new URLSearchParams(location.search);
  if (rec.game && !q.has("arena")) f.set("game", rec.game);
  f.set("salvo", String(at));
  history.replaceState(null, "", `#${f}`);
  $("share").textContent = `Link to this moment: ${location.href}`;
}

function play(on) {
  clearInterval(playing); playing = null;
  if (on && rec) {
    if (at >= rec.salvos.length) show(0);
    playing = setInterval(() => { if (at >= rec.salvos.length) play(false); else show(at + 1); },
                          BASE_MS / Number($("speed").value));
  }
  $("play").textContent = playing ? "pause" : "play";
}

async function fetchRecord(query) {
  try {
    const resp = await fetch(`record${query}`, { cache: "no-store" });
    return resp.ok ? parseRecord(await resp.text()) : null;
  } catch { return null; }
}

function fromFile(file) {
  file.text().then((text) => {
    const r = parseRecord(text);
    if (r) { play(false); load(r, 0); } else $("source").textContent = `${file.name} holds no game record.`;
  });
}

$("first").onclick = () => { play(false); show(0); };
$("back").onclick = () => { play(false); show(at - 1); };
$("forward").onclick = () => { play(false); show(at + 1); };
$("last").onclick = () => { play(false); show(rec.salvos.length); };
$("play").onclick = () => play(!playing);
$("scrub").oninput = () => { play(false); show(Number($("scrub").value)); };
$("speed").onchange = () => { if (playing) play(true); };
$("file").onchange = (ev) => { if (ev.target.files[0]) fromFile(ev.target.files[0]); };
document.addEventListener("dragover", (ev) => { ev.preventDefault(); $("drop").classList.add("over"); });
document.addEventListener("drop", (ev) => {
  ev.preventDefault(); $("drop").classList.remove("over");
  if (ev.dataTransfer.files[0]) fromFile(ev.dataTransfer.files[0]);
});
document.addEventListener("keydown", (ev) => {
  if (!rec || ev.target.tagName === "INPUT" && ev.target.type !== "range") return;
  const k = { ArrowLeft: () => $("back").click(), ArrowRight: () => $("forward").click(), " ": () => $("play").click(),
              Home: () => $("first").click(), End: () => $("last").click() }[ev.key];
  if (k) { ev.preventDefault(); k(); }
});
window.addEventListener("hashchange", async () => {
  const f = fragment(), game = f.get("game"), i = Number(f.get("salvo"));
  if (game && (!rec || rec.game !== game)) {  // a game picked from tonight's list
    const r = await fetchRecord(`?game=${encodeURIComponent(game)}`);
    if (r) { play(false); load(r, Number.isFinite(i) ? i : 0); }
  } else if (rec && Number.isFinite(i) && i !== at) show(i);
});

// The games this server kept tonight (GET /records), each a link to its replay.
async function listGames() {
  let games = [];
  try {
    const resp = await fetch("records", { cache: "no-store" });
    games = resp.ok ? await resp.json() : [];
  } catch { games = []; }
  if (!Array.isArray(games) || !games.length) return;
  $("games").replaceChildren(...games.map((g) => {
    const players = Array.isArray(g.players) ? g.players.join(" vs ") : "";
    const result = g.winner ? `${g.winner} wins` : g.termination || "";
    const when = Number.isFinite(g.at) ? new Date(g.at * 1000).toTimeString().slice(0, 5) : "";
    const where = [g.arena, when].filter(Boolean).join(" · ");  // identical matches told apart
    return el("li", {}, el("a", { href: `#${new URLSearchParams({ game: g.game, salvo: "0" })}`, text: players }),
              el("span", { text: result ? ` · ${result}` : "" }), el("span", { class: "where", text: where ? ` · ${where}` : "" }));
  }));
  $("tonight").hidden = false;
}

(async () => {
  const q = new URLSearchParams(location.search), f = fragment();
  const start = f.has("salvo") ? Number(f.get("salvo")) : NaN;
  let r = null;
  if (q.has("arena")) r = await fetchRecord(`?arena=${encodeURIComponent(q.get("arena"))}`);
  else if (f.has("game")) r = await fetchRecord(`?game=${encodeURIComponent(f.get("game"))}`);
  if (!r && !q.has("arena") && !f.has("game")) r = await fetchRecord("");
  if (r) load(r, start);
  else {
    if (q.has("arena") || f.has("game")) $("source").prepend(el("strong", { text: "No record for that game here (yet). " }));
    await listGames();
  }
  window.salvoReplayReady = true;  // for tests
})();
