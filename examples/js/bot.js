'use strict';
// A complete salvo bot (protocol v2, reads v2.1's extra fields when they are
// there) in JavaScript: MQTT.js and libsodium, written from docs/protocol.md
// alone. It joins with a request sealed to /game/pubkey, places a random
// fleet sealed with the team key, fires shots bound to their target, turn and
// game whenever /game/turn names it, and exits when the game is over.
//
//   node bot.js --name alice --secret S --password MQTT_PW [--host H] [--port P]
//               [--prefix ARENA] [--ca-file ca.crt]
// or the same settings from SALVO_NAME, SALVO_SECRET, SALVO_PASSWORD,
// SALVO_HOST, SALVO_PORT, SALVO_PREFIX, SALVO_CA_FILE, SALVO_USERNAME.
// With a CA file it speaks MQTT over TLS (port 8883 unless --port) and trusts
// that CA only. Exit status: 0 after a game, 1 when the join is refused.
const fs = require('fs');
const { parseArgs } = require('util');
const mqtt = require('mqtt');
const sodium = require('libsodium-wrappers-sumo');

const FLEET = { carrier: 5, battleship: 4, destroyer: 3, submarine: 3, patrolboat: 2 };
const env = process.env;
const { values: opt } = parseArgs({
  options: {
    name: { type: 'string', default: env.SALVO_NAME },
    secret: { type: 'string', default: env.SALVO_SECRET },
    username: { type: 'string', default: env.SALVO_USERNAME },
    password: { type: 'string', default: env.SALVO_PASSWORD },
    host: { type: 'string', default: env.SALVO_HOST || 'localhost' },
    port: { type: 'string', default: env.SALVO_PORT },
    prefix: { type: 'string', default: env.SALVO_PREFIX || '' },
    'ca-file': { type: 'string', default: env.SALVO_CA_FILE },
  },
});
if (!opt.name || !opt.secret) {
  console.error('usage: node bot.js --name NAME --secret SECRET [--password PW] [--host H] [--port P]\n'
    + '                   [--prefix ARENA] [--ca-file F]   (or SALVO_NAME, SALVO_SECRET, ...)');
  process.exit(2);
}
const NAME = opt.name;
const ROOT = opt.prefix ? `/${opt.prefix}` : '';
const ME = `/players/${NAME}`;

// -- crypto (protocol.md section 3): every base64 is the standard, padded one
const B64 = () => sodium.base64_variants.ORIGINAL;

function teamKey(name, secret) {
  // salt: unkeyed 16-byte BLAKE2b of "battleship-salvo/" + name; argon2id, INTERACTIVE limits
  const salt = sodium.crypto_generichash(16, sodium.from_string(`battleship-salvo/${name}`), null);
  return sodium.crypto_pwhash(32, sodium.from_string(secret), salt, sodium.crypto_pwhash_OPSLIMIT_INTERACTIVE,
    sodium.crypto_pwhash_MEMLIMIT_INTERACTIVE, sodium.crypto_pwhash_ALG_ARGON2ID13);
}

function seal(key, text) {
  // nonce (24 random bytes) || secretbox: libsodium's _easy layout, nonce in front
  const nonce = sodium.randombytes_buf(sodium.crypto_secretbox_NONCEBYTES);
  const box = sodium.crypto_secretbox_easy(sodium.from_string(text), nonce, key);
  const out = new Uint8Array(nonce.length + box.length);
  out.set(nonce);
  out.set(box, nonce.length);
  return sodium.to_base64(out, B64());
}

function sealedJoin(pubkeyB64, text) {
  const box = sodium.crypto_box_seal(sodium.from_string(text), sodium.from_base64(pubkeyB64, B64()));
  return sodium.to_base64(box, B64());
}

function randomFleet() {
  const taken = new Set();
  const fleet = {};
  for (const [ship, length] of Object.entries(FLEET)) {
    for (;;) {
      const x = rand(10), y = rand(10), across = rand(2) === 0;
      const cells = [...Array(length).keys()].map((i) => (across ? [x + i, y] : [x, y + i]));
      if (cells.every(([cx, cy]) => cx < 10 && cy < 10 && !taken.has(cx * 10 + cy))) {
        cells.forEach(([cx, cy]) => taken.add(cx * 10 + cy));
        fleet[ship] = { coordinates: `${x};${y}`, orientation: across ? 'HORIZONTAL' : 'VERTICAL' };
        break;
      }
    }
  }
  return fleet;
}
const rand = (n) => sodium.randombytes_uniform(n);
const parse = (text) => { try { return JSON.parse(text); } catch { return null; } };

// -- the bot: everything it knows, and one step() that acts on it
const seen = new Map(); // topic path -> latest payload (retained or live)
const sent = new Map(); // first 16 characters of a signature -> its fire data (v2.1 refusals name it)
const untried = new Map(); // target -> cells not shot at yet
const hitsOnMe = new Set(); // "game/turn/shot": QoS 1 may deliver a hit twice; (turn, shot) is per game
let key, client, joinId = null, joined = false, placed = false, lastTurn = 0, refusals = 0, shots = 0, ending = false;

function publish(path, payload) {
  client.publish(ROOT + path, payload, { qos: 1 }); // QoS 1, never retained (section 1)
}

function join() {
  joinId = sodium.to_hex(sodium.randombytes_buf(12)); // unguessable: only a refusal echoing it is ours
  const request = JSON.stringify({ name: NAME, secret: opt.secret, request_id: joinId });
  publish('/game/request_participation', sealedJoin(seen.get('/game/pubkey'), request));
}

function place() {
  placed = true;
  for (const [ship, placement] of Object.entries(randomFleet())) {
    publish(`${ME}/ships/${ship}/place`, seal(key, JSON.stringify(placement)));
  }
}

function opponents() {
  const players = parse(seen.get('/players/list')) || [];
  return players.filter((p) => p !== NAME && seen.get(`/players/${p}/defeated`) !== 'true');
}

function fire(turn) {
  const targets = opponents();
  if (!targets.length) return;
  const target = targets[rand(targets.length)];
  if (!untried.get(target)?.length) untried.set(target, [...Array(100).keys()]); // (re)sweep the board
  const cells = untried.get(target);
  const cell = cells.splice(rand(cells.length), 1)[0];
  // v2: the signed data names its target, turn and game, so it is good for this one shot only
  const data = { x: cell % 10, y: Math.floor(cell / 10), target, turn, game: seen.get('/game/id') };
  const signature = seal(key, JSON.stringify(data));
  sent.set(signature.slice(0, 16), data);
  shots += 1;
  publish(`/players/${target}/fire`, JSON.stringify({ data, signature }));
}

function step() {
  const state = seen.get('/game/state');
  if (!joinId && !joined && state === 'lobby' && seen.get('/game/pubkey')) join();
  if (joined && !placed) place();
  const turn = parse(seen.get('/game/turn'));
  if (joined && state === 'turn' && turn && turn.player === NAME && turn.turn > lastTurn) {
    lastTurn = turn.turn; // a referee restart republishes /game/turn: fire each turn once
    for (let i = 0; i < turn.shots; i++) fire(turn.turn);
  }
  if (joined && state === 'over') finish();
}

function onJoinRefusal(report) {
  if (report.request_id !== joinId) return; // somebody else's
  if (report.code === 'busy') { // the referee is checking other joins: try again in a moment
    joinId = null;
    setTimeout(step, 500);
    return;
  }
  console.log(`join refused: ${report.code}: ${report.error}`);
  ending = true;
  client.end(false, () => process.exit(1));
}

function onRefusal(report) {
  // v2.1: a fire refusal names its shot ("signature" prefix, "shot"); v2 does not.
  const shot = (report.signature && sent.get(report.signature)) || report.shot;
  const which = shot ? ` (shot ${shot.x},${shot.y} at ${shot.target})` : '';
  switch (report.code) {
    case 'left_out': case 'lobby_closed': case 'game_aborted': // sent away: join the next lobby
      console.log(`sent away: ${report.code}`);
      joined = placed = false;
      joinId = null;
      lastTurn = 0; // the next game counts its turns from 1 again
      return;
    case 'not_joined': // a placement overtook the join: place again
      placed = false;
      return;
    case 'defeated_target': case 'unknown_target': case 'replayed': case 'bad_signature':
      // the shot is lost (its signature is spent): sign a new one while the turn is ours
      refusals += 1;
      console.log(`refused: ${report.code}${which}: ${report.error}`);
      if (parse(seen.get('/game/turn'))?.player === NAME) fire(lastTurn);
      return;
    default: // wrong_turn, not_current_player, off_board, malformed, ...: a bug of ours
      refusals += 1;
      console.log(`refused: ${report.code}${which}: ${report.error} (${report.topic})`);
  }
}

function onMessage(topic, payload, packet) {
  const path = topic.slice(ROOT.length);
  const text = payload.toString();
  seen.set(path, text);
  if (path === '/game/errors') {
    const report = parse(text);
    if (report && 'request_id' in report) onJoinRefusal(report);
  } else if (path === `${ME}/error` || (path.startsWith(`${ME}/ships/`) && path.endsWith('/error'))) {
    const report = parse(text);
    if (report) onRefusal(report);
  } else if (path === `${ME}/hit`) {
    const hit = parse(text); // v2.1 carries the game; before it, the game is the current one
    if (hit) hitsOnMe.add(`${hit.game ?? seen.get('/game/id')}/${hit.turn}/${hit.shot}`);
  } else if (!packet.retain && path.startsWith(`${ME}/ships/`) && path.endsWith('/approved') && joinId) {
    joined = true; // a live `approved` is the accepted join (a retained copy proves nothing)
    joinId = null;
  }
  step();
}

function finish() {
  if (ending) return;
  ending = true;
  const stats = parse(seen.get(`/game/stats/players/${NAME}`)) || {};
  const figures = `${stats.shots ?? shots} shots, ${stats.hits ?? '?'} hits`;
  console.log(`me: ${figures}; shot at ${hitsOnMe.size} times; ${refusals} refusals`);
  console.log(`winner: ${seen.get('/game/winner') || 'nobody'}`);
  client.end(false, () => process.exit(0));
}

async function main() {
  await sodium.ready;
  key = teamKey(NAME, opt.secret); // argon2id takes a moment and 64 MiB: derive once
  const caFile = opt['ca-file'];
  const port = opt.port || (caFile ? 8883 : 1883);
  client = mqtt.connect(`${caFile ? 'mqtts' : 'mqtt'}://${opt.host}:${port}`, {
    username: opt.username || NAME,
    password: opt.password,
    ca: caFile ? fs.readFileSync(caFile) : undefined, // trust the organiser's CA only
    protocolVersion: 4, // MQTT 3.1.1: nothing here needs 5
    reconnectPeriod: 1000,
  });
  client.on('connect', () => {
    // Latency trap: Node leaves Nagle's algorithm on; a salvo's small
    // publishes would wait for the previous ones' acknowledgements.
    client.stream.setNoDelay?.(true);
    const topics = ['/game/#', '/players/list', '/players/+/defeated', `${ME}/hit`, `${ME}/error`,
      `${ME}/ships/+/approved`, `${ME}/ships/+/error`];
    client.subscribe(topics.map((t) => ROOT + t), { qos: 1 });
  });
  client.on('message', onMessage);
  client.on('error', (err) => {
    if (ending) return;
    console.error(`mqtt: ${err.message}`);
    process.exit(3);
  });
}

main();
