/* A complete salvo bot (protocol v2; reads v2.1's extra fields when they are there) in C: Paho MQTT C,
 * libsodium and cJSON, written from docs/protocol.md alone. It joins with a request sealed to /game/pubkey,
 * places a random fleet sealed with the team key, fires shots bound to their target, turn and game whenever
 * /game/turn names it, and exits when the game is over. One thread: MQTTClient_receive() is the event loop.
 *
 *   salvo-bot --name alice --secret S --password MQTT_PW [--host H] [--port P] [--prefix ARENA] [--ca-file F]
 * or SALVO_NAME, SALVO_SECRET, SALVO_PASSWORD, SALVO_HOST, SALVO_PORT, SALVO_PREFIX, SALVO_CA_FILE,
 * SALVO_USERNAME. With a CA file: MQTT over TLS (port 8883 unless --port), trusting that CA only.
 * Exit status: 0 after a game, 1 when the join is refused, 3 when the broker cannot be used. */
#include <MQTTClient.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static const char *SHIPS[] = {"carrier", "battleship", "destroyer", "submarine", "patrolboat"};
static const int LENGTHS[] = {5, 4, 3, 3, 2};
enum { MAXSEEN = 512, MAXPLAYERS = 16, MAXSENT = 64, MAXHITS = 1024 };

static struct { char *name, *secret, *username, *password, *host, *port, *prefix, *ca_file; } opt;
static MQTTClient client;
static unsigned char key[crypto_secretbox_KEYBYTES];
static char root[40], me[64];
static struct { char *path, *text; } seen[MAXSEEN]; /* topic path -> latest payload */
static struct { char sig[17]; char target[33]; int x, y; } sent[MAXSENT]; /* this turn's shots */
static struct { char target[33]; int start, next; } boards[MAXPLAYERS]; /* each opponent's sweep */
static char *hits_on_me[MAXHITS]; /* "game/turn/shot": QoS 1 may deliver a hit twice */
static int nseen, nsent, nhits, joined, placed, last_turn, refusals, shots;
static char join_id[25]; static time_t join_not_before;

/* a JSON object's field: any, a string ("" if not one), an integer (0 if not one) */
static cJSON *field(cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *str(cJSON *o, const char *k) { return cJSON_IsString(field(o, k)) ? field(o, k)->valuestring : ""; }
static int num(cJSON *o, const char *k) { return cJSON_IsNumber(field(o, k)) ? field(o, k)->valueint : 0; }

static const char *get(const char *path, const char *fallback) { /* a topic path's latest payload */
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i].path, path) == 0) return seen[i].text;
    return fallback;
}

static void remember(const char *path, const char *text) {
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i].path, path) == 0) { free(seen[i].text); seen[i].text = strdup(text); return; }
    if (nseen < MAXSEEN) { seen[nseen].path = strdup(path); seen[nseen++].text = strdup(text); }
}

/* -- crypto (protocol.md section 3): base64 is the standard, padded one everywhere */
static char *b64(const unsigned char *bin, size_t len) { /* into a static buffer: use it before the next call */
    static char out[8192];
    return sodium_bin2base64(out, sizeof out, bin, len, sodium_base64_VARIANT_ORIGINAL);
}

static int team_key(void) { /* argon2id of the secret, salted with BLAKE2b-128("battleship-salvo/" + name) */
    unsigned char salt[crypto_pwhash_SALTBYTES];
    char label[64];
    snprintf(label, sizeof label, "battleship-salvo/%s", opt.name);
    crypto_generichash(salt, sizeof salt, (unsigned char *)label, strlen(label), NULL, 0); /* unkeyed */
    return crypto_pwhash(key, sizeof key, opt.secret, strlen(opt.secret), salt, crypto_pwhash_OPSLIMIT_INTERACTIVE,
                         crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13);
}

static char *seal(const char *text) { /* base64(nonce || secretbox): the _easy layout, nonce in front */
    size_t len = strlen(text);
    unsigned char out[4096];
    randombytes_buf(out, crypto_secretbox_NONCEBYTES);
    crypto_secretbox_easy(out + crypto_secretbox_NONCEBYTES, (const unsigned char *)text, len, out, key);
    return b64(out, crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + len);
}

static void publish(const char *path, const char *payload) { /* QoS 1, never retained (section 1) */
    char topic[256];
    snprintf(topic, sizeof topic, "%s%s", root, path);
    int rc;
    while ((rc = MQTTClient_publish(client, topic, (int)strlen(payload), payload, 1, 0, NULL)) ==
           MQTTCLIENT_MAX_MESSAGES_INFLIGHT)
        MQTTClient_yield(); /* ten in flight: let acknowledgements in */
    if (rc != MQTTCLIENT_SUCCESS) fprintf(stderr, "publish %s failed: %d\n", topic, rc);
}

static void join(void) {
    unsigned char pub[crypto_box_PUBLICKEYBYTES], id[12];
    const char *pubkey = get("/game/pubkey", "");
    if (sodium_base642bin(pub, sizeof pub, pubkey, strlen(pubkey), 0, 0, 0, sodium_base64_VARIANT_ORIGINAL))
        return;
    randombytes_buf(id, sizeof id); /* unguessable: only a refusal echoing it is ours */
    sodium_bin2hex(join_id, sizeof join_id, id, sizeof id);
    cJSON *request = cJSON_CreateObject();
    cJSON_AddStringToObject(request, "name", opt.name);
    cJSON_AddStringToObject(request, "secret", opt.secret);
    cJSON_AddStringToObject(request, "request_id", join_id);
    char *text = cJSON_PrintUnformatted(request);
    size_t len = strlen(text); /* escaped, a long secret may not fit the box: refuse it */
    unsigned char box[4096];
    if (len + crypto_box_SEALBYTES > sizeof box) printf("join refused: secret too long\n"), exit(1);
    crypto_box_seal(box, (unsigned char *)text, len, pub); /* only the referee can open it */
    publish("/game/request_participation", b64(box, crypto_box_SEALBYTES + len));
    free(text), cJSON_Delete(request);
}

static void place(void) { /* a random fleet: each ship at a random free spot */
    int taken[100] = {0};
    placed = 1;
    for (int s = 0; s < 5; s++) {
        int x, y, across, ok;
        do {
            x = randombytes_uniform(10), y = randombytes_uniform(10), across = randombytes_uniform(2);
            ok = (across ? x : y) + LENGTHS[s] <= 10;
            for (int i = 0; ok && i < LENGTHS[s]; i++) ok = !taken[across ? y * 10 + x + i : (y + i) * 10 + x];
        } while (!ok);
        for (int i = 0; i < LENGTHS[s]; i++) taken[across ? y * 10 + x + i : (y + i) * 10 + x] = 1;
        char placement[96], path[128];
        snprintf(placement, sizeof placement, "{\"coordinates\":\"%d;%d\",\"orientation\":\"%s\"}", x, y,
                 across ? "HORIZONTAL" : "VERTICAL");
        snprintf(path, sizeof path, "%s/ships/%s/place", me, SHIPS[s]);
        publish(path, seal(placement));
    }
}

static void fire(int turn) {
    char targets[MAXPLAYERS][33]; /* players afloat, me excepted */
    int n = 0, t = 0;
    cJSON *list = cJSON_Parse(get("/players/list", "[]")), *p;
    cJSON_ArrayForEach(p, list) {
        if (!cJSON_IsString(p) || !strcmp(p->valuestring, opt.name) || n == MAXPLAYERS) continue;
        char path[96];
        snprintf(path, sizeof path, "/players/%s/defeated", p->valuestring);
        if (strcmp(get(path, ""), "true")) snprintf(targets[n++], 33, "%s", p->valuestring);
    }
    cJSON_Delete(list);
    if (n == 0) return;
    const char *target = targets[randombytes_uniform(n)];
    while (t < MAXPLAYERS - 1 && boards[t].target[0] && strcmp(boards[t].target, target)) t++;
    if (!boards[t].target[0]) snprintf(boards[t].target, 33, "%s", target), boards[t].start = randombytes_uniform(100);
    /* steps of 37 from a random cell visit all 100 cells, scattered, before any twice */
    int cell = (boards[t].start + 37 * boards[t].next++) % 100;
    /* v2: the data names target, turn and game (good for this one shot); none of them needs JSON escapes */
    char data[256], payload[1024], path[96];
    snprintf(data, sizeof data, "{\"x\":%d,\"y\":%d,\"target\":\"%s\",\"turn\":%d,\"game\":\"%s\"}", cell % 10,
             cell / 10, target, turn, get("/game/id", ""));
    const char *signature = seal(data); /* the very bytes signed go out as `data` */
    snprintf(payload, sizeof payload, "{\"data\":%s,\"signature\":\"%s\"}", data, signature);
    if (nsent < MAXSENT) { /* v2.1 refusals name a shot by its signature's first 16 characters */
        snprintf(sent[nsent].sig, 17, "%s", signature);
        snprintf(sent[nsent].target, 33, "%s", target);
        sent[nsent].x = cell % 10, sent[nsent++].y = cell / 10;
    }
    snprintf(path, sizeof path, "/players/%s/fire", target);
    publish(path, payload);
    shots++;
}

static int my_turn(int *turn, int *count) { /* /game/turn names me */
    cJSON *t = cJSON_Parse(get("/game/turn", ""));
    int mine = strcmp(str(t, "player"), opt.name) == 0;
    *turn = num(t, "turn"), *count = num(t, "shots");
    cJSON_Delete(t);
    return mine;
}

static void step(void) {
    const char *state = get("/game/state", "");
    int turn, count;
    if (!joined && !join_id[0] && !strcmp(state, "lobby") && *get("/game/pubkey", "") && time(NULL) >= join_not_before)
        join();
    if (joined && !placed) place();
    if (joined && !strcmp(state, "turn") && my_turn(&turn, &count) && turn > last_turn) {
        last_turn = turn, nsent = 0; /* a referee restart republishes /game/turn: fire each turn once */
        for (int i = 0; i < count; i++) fire(turn);
    }
}

static void on_join_refusal(cJSON *report) {
    if (!join_id[0] || strcmp(str(report, "request_id"), join_id)) return; /* somebody else's */
    join_id[0] = 0;
    if (!strcmp(str(report, "code"), "busy")) { join_not_before = time(NULL) + 1; return; } /* again soon */
    printf("join refused: %s: %s\n", str(report, "code"), str(report, "error"));
    exit(1);
}

static void on_refusal(cJSON *report) {
    const char *code = str(report, "code"), *sig = str(report, "signature");
    char which[80] = "";
    for (int i = 0; i < nsent && *sig; i++) /* v2.1 names the shot; v2 does not */
        if (!strncmp(sent[i].sig, sig, 16))
            snprintf(which, sizeof which, " (shot %d,%d at %s)", sent[i].x, sent[i].y, sent[i].target);
    if (!strcmp(code, "left_out") || !strcmp(code, "lobby_closed") || !strcmp(code, "game_aborted")) {
        printf("sent away: %s\n", code); /* join the next lobby */
        joined = placed = 0, join_id[0] = 0, last_turn = 0; /* the next game's turns start at 1 */
    } else if (!strcmp(code, "not_joined")) {
        placed = 0; /* a placement overtook the join: place again */
    } else {
        refusals++;
        printf("refused: %s%s: %s (%s)\n", code, which, str(report, "error"), str(report, "topic"));
        int turn, count; /* the shot is lost and its signature spent: sign a new one while the turn is ours */
        if ((!strcmp(code, "defeated_target") || !strcmp(code, "unknown_target") || !strcmp(code, "replayed") ||
             !strcmp(code, "bad_signature")) && my_turn(&turn, &count) && turn == last_turn)
            fire(last_turn);
    }
}

static void on_message(const char *path, const char *text, int retained) {
    size_t mlen = strlen(me);
    int mine = !strncmp(path, me, mlen), ends_error = strlen(path) > 6 && !strcmp(path + strlen(path) - 6, "/error");
    cJSON *json = cJSON_Parse(text); /* NULL when it is not JSON: plain scalars are */
    remember(path, text);
    if (!strcmp(path, "/game/errors") && cJSON_GetObjectItemCaseSensitive(json, "request_id")) {
        on_join_refusal(json);
    } else if (mine && ends_error && json) {
        on_refusal(json);
    } else if (mine && !strcmp(path + mlen, "/hit")) { /* (turn, shot) is per game; v2.1 says which */
        char id[128];
        int known = 0;
        snprintf(id, sizeof id, "%s/%d/%d", *str(json, "game") ? str(json, "game") : get("/game/id", ""),
                 num(json, "turn"), num(json, "shot"));
        for (int i = 0; i < nhits; i++) known |= !strcmp(hits_on_me[i], id);
        if (!known && nhits < MAXHITS) hits_on_me[nhits++] = strdup(id);
    } else if (mine && !retained && join_id[0] && strstr(path, "/approved")) {
        joined = 1, join_id[0] = 0; /* a live `approved` is the accepted join (a retained copy proves nothing) */
    }
    cJSON_Delete(json);
}

static char *setting(const char *env, char *fallback) { return getenv(env) ? getenv(env) : fallback; }

int main(int argc, char **argv) {
    opt.name = setting("SALVO_NAME", NULL), opt.secret = setting("SALVO_SECRET", NULL);
    opt.username = setting("SALVO_USERNAME", NULL), opt.password = setting("SALVO_PASSWORD", NULL);
    opt.host = setting("SALVO_HOST", "localhost"), opt.port = setting("SALVO_PORT", NULL);
    opt.prefix = setting("SALVO_PREFIX", ""), opt.ca_file = setting("SALVO_CA_FILE", NULL);
    static struct option longs[] = {{"name", 1, 0, 'n'}, {"secret", 1, 0, 's'}, {"username", 1, 0, 'u'},
                                    {"password", 1, 0, 'P'}, {"host", 1, 0, 'h'}, {"port", 1, 0, 'p'},
                                    {"prefix", 1, 0, 'x'}, {"ca-file", 1, 0, 'c'}, {0, 0, 0, 0}};
    char **slots[128] = {['n'] = &opt.name, ['s'] = &opt.secret, ['u'] = &opt.username, ['P'] = &opt.password,
                         ['h'] = &opt.host, ['p'] = &opt.port, ['x'] = &opt.prefix, ['c'] = &opt.ca_file};
    for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;)
        if (c > 0 && c < 128 && slots[c]) *slots[c] = optarg;
        else return 2;
    if (!opt.name || !opt.secret) return fprintf(stderr, "usage: see the top of bot.c or README.md\n"), 2;
    if (sodium_init() < 0 || team_key() != 0) return 4; /* argon2id: ~70 ms and 64 MiB, derive once */
    snprintf(root, sizeof root, "%s%s", *opt.prefix ? "/" : "", opt.prefix);
    snprintf(me, sizeof me, "/players/%s", opt.name);
    setvbuf(stdout, NULL, _IOLBF, 0);

    char uri[256], client_id[40];
    snprintf(uri, sizeof uri, "%s://%s:%s", opt.ca_file ? "ssl" : "tcp", opt.host,
             opt.port ? opt.port : opt.ca_file ? "8883" : "1883");
    snprintf(client_id, sizeof client_id, "%.20s-%08x", opt.name, randombytes_random());
    MQTTClient_create(&client, uri, client_id, MQTTCLIENT_PERSISTENCE_NONE, NULL);
    MQTTClient_connectOptions conn = MQTTClient_connectOptions_initializer;
    MQTTClient_SSLOptions ssl = MQTTClient_SSLOptions_initializer;
    conn.username = opt.username ? opt.username : opt.name, conn.password = opt.password;
    conn.reliable = 0; /* latency trap 1: the default, 1, lets one QoS 1 message be in flight at a time */
    if (opt.ca_file) {
        ssl.trustStore = opt.ca_file; /* the organiser's CA, and only it */
        ssl.enableServerCertAuth = 1, ssl.verify = 1; /* verify the chain and the host name */
        conn.ssl = &ssl;
    }
    int rc = MQTTClient_connect(client, &conn);
    if (rc != MQTTCLIENT_SUCCESS) return fprintf(stderr, "cannot connect to %s: %d\n", uri, rc), 3;
    for (int fd = 3, one = 1, type; fd < 64; fd++) { /* latency trap 2: Paho leaves Nagle's */
        socklen_t len = sizeof type; /* algorithm on, with no option for it: turn it off on our TCP socket */
        if (!getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) && type == SOCK_STREAM)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    const char *paths[] = {"/game/#", "/players/list", "/players/+/defeated", "/hit", "/error",
                           "/ships/+/approved", "/ships/+/error"};
    char topics[7][256], *filters[7];
    int qos[7];
    for (int i = 0; i < 7; i++)
        snprintf(topics[i], 256, "%s%s%s", root, i < 3 ? "" : me, paths[i]), filters[i] = topics[i], qos[i] = 1;
    MQTTClient_subscribeMany(client, 7, filters, qos); /* the public topics and mine (nobody reads fire) */

    while (!joined || strcmp(get("/game/state", ""), "over")) { /* one message (or 100 ms), then act on it */
        char *topic = NULL;
        MQTTClient_message *msg = NULL;
        int topic_len;
        if (MQTTClient_receive(client, &topic, &topic_len, &msg, 100) != MQTTCLIENT_SUCCESS)
            return fprintf(stderr, "connection lost\n"), 3;
        if (msg) {
            char *text = strndup(msg->payload, msg->payloadlen);
            if (!strncmp(topic, root, strlen(root))) on_message(topic + strlen(root), text, msg->retained);
            free(text), MQTTClient_freeMessage(&msg), MQTTClient_free(topic);
        }
        step();
    }
    char path[96];
    snprintf(path, sizeof path, "/game/stats/players/%s", opt.name);
    cJSON *stats = cJSON_Parse(get(path, "{}"));
    printf("me: %d shots, %d hits; shot at %d times; %d refusals\n", shots, num(stats, "hits"), nhits, refusals);
    printf("winner: %s\n", *get("/game/winner", "") ? get("/game/winner", "") : "nobody");
    MQTTClient_disconnect(client, 1000);
    return 0;
}
