"use strict";
// Boards, shared by the projector (spectate.js) and the replay viewer
// (replay.js). Everything drawn goes through textContent: names and payloads
// come off the network. Coordinates as in docs/protocol.md section 2: x the
// column, y the row, origin top left; HORIZONTAL extends to +x, VERTICAL to +y.
const Salvo = (() => {
  const SIZE = 10;
  const FLEET = { carrier: 5, battleship: 4, destroyer: 3, submarine: 3, patrolboat: 2 };

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") e.textContent = v; else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v);
    }
    for (const c of children) if (c) e.append(c);
    return e;
  }

  function json(text) { try { return JSON.parse(text); } catch { return null; } }

  function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }

  function shipCells(ship, p) {
    const cells = [];
    for (let i = 0; i < (FLEET[ship] || 0); i++) {
      cells.push(p.orientation === "VERTICAL" ? [p.x, p.y + i] : [p.x + i, p.y]);
    }
    return cells;
  }

  // Is this a game record (docs/protocol.md section 7) the boards can show?
  function isRecord(r) {
    return !!r && typeof r === "object" && Array.isArray(r.players) && Array.isArray(r.salvos)
      && r.fleets && typeof r.fleets === "object";
  }

  // Every player's board once the first `upto` salvos of a record are fired.
  function replayState(rec, upto) {
    const boards = new Map();
    for (const name of rec.players) {
      const ships = new Map();  // "x,y" -> ship id
      for (const [ship, p] of Object.entries(rec.fleets[name] || {})) {
        for (const [x, y] of shipCells(ship, p)) ships.set(`${x},${y}`, ship);
      }
      boards.set(name, { ships, shots: new Map(), sunk: new Set(), defeated: false, fired: 0, hits: 0 });
    }
    const done = rec.salvos.slice(0, upto);
    done.forEach((s, i) => {
      const shooter = boards.get(s.player);
      if (shooter) { shooter.fired += (s.shots || []).length; shooter.hits += s.hits || 0; }
      for (const shot of s.shots || []) {
        const b = boards.get(shot.target);
        if (b) b.shots.set(`${shot.x},${shot.y}`, { hit: !!shot.hit, fresh: i === done.length - 1 });
      }
      for (const k of s.sunk || []) { const b = boards.get(k.owner); if (b) b.sunk.add(k.ship); }
      for (const d of s.defeated || []) { const b = boards.get(d); if (b) b.defeated = true; }
    });
    return boards;
  }

  // One player's board: ships, shots received (hit or miss), sunk ships.
  function board(name, st, opts = {}) {
    const grid = el("div", { class: "grid", role: "grid", "aria-label": `${name}'s board` });
    for (let y = 0; y < SIZE; y++) {
      for (let x = 0; x < SIZE; x++) {
        const key = `${x},${y}`, ship = st.ships.get(key), shot = st.shots.get(key);
        const cls = ["cell"];
        if (ship) cls.push("ship", `ship-${ship}`);
        if (ship && st.sunk.has(ship)) cls.push("sunk");
        if (shot) cls.push(shot.hit ? "hit" : "miss");
        if (shot && shot.fresh) cls.push("fresh");
        grid.append(el("div", { class: cls.join(" "), "data-x": x, "data-y": y, role: "gridcell" }));
      }
    }
    const label = el("div", { class: "board-name" }, el("span", { text: name }),
      el("span", { class: "board-score", text: `${st.sunk.size}/5 sunk` }));
    return el("figure", { class: `board${st.defeated ? " defeated" : ""}${name === opts.winner ? " won" : ""}`,
                          "data-board": name }, label, grid);
  }

  // A player's fleet as the public topics tell it: which ships sank (not where).
  function fleetStrip(sunk) {
    return el("div", { class: "fleet" }, ...Object.entries(FLEET).map(([ship, n]) =>
      el("span", { class: `pill${sunk.has(ship) ? " sunk" : ""}`, title: ship, "data-ship": ship },
         ...Array.from({ length: n }, () => el("i")))));
  }

  // "Turn 3: alice, 2 hits of 5 — bob's carrier sunk"
  function salvoLine(s) {
    const shots = Array.isArray(s.shots) ? s.shots.length : s.shots;
    let text = `Turn ${s.turn}: ${s.player}, ${plural(s.hits, "hit")} of ${shots}`;
    const sunk = (s.sunk || []).map((k) => `${k.owner}'s ${k.ship} sunk`);
    const out = (s.defeated || []).map((d) => `${d} is defeated`);
    if (sunk.length || out.length) text += ` — ${[...sunk, ...out].join(", ")}`;
    return text;
  }

  return { SIZE, FLEET, el, json, plural, isRecord, replayState, board, fleetStrip, salvoLine };
})();
