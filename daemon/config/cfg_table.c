/* cfg_table.c - every configuration option of moshid, in one table.
 *
 * Adding an option: a field in struct cfg (cfg.h), a row here. The loader,
 * --dump-config, reload and docs/configuration.md (make config-doc) follow
 * from the row. Keep rows grouped by section; the dump and the docs use
 * this order.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "audio_opus.h"
#include "cfg_int.h"
#include "log.h"
#include "query.h"
#include "samp.h"
#include "srv_proxy.h"
#include "text.h"

const char *const cfg_variant_names[] = {"auto", "kyutai", "personaplex", NULL};
const char *const cfg_backend_names[] = {"auto", "cpu", "cuda", NULL};
const char *const cfg_weights_names[] = {"stored", "bf16", "int8", NULL};
const char *const cfg_kv_names[] = {"native", "int8", NULL};
const char *const cfg_pre_skip_names[] = {"ignore", "rfc", NULL};
const char *const cfg_log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const cfg_codec_names[] = {"device", "host", NULL};
const int cfg_variant_lm[] = {LM_VARIANT_AUTO, LM_VARIANT_KYUTAI, LM_VARIANT_PERSONAPLEX};
/* audio.input_pre_skip: the audio_pre_skip of each name */
static const int pre_skip_values[] = {AUDIO_PRE_SKIP_IGNORE, AUDIO_PRE_SKIP_RFC};
/* cuda.graphs, cuda.codec_graphs: true (on) is lm_gpu_opts' 0 (not off) */
static const int graphs_off_values[] = {1, 0};

static const char *const default_origins[] = {"same-origin", "localhost", NULL};

/* Longest path, bytes (host names: TEXT_HOST_MAX). */
#define PATH_MAX_BYTES 4095
#define ORIGIN_MAX 1024

/* server.listen item: an IPv4 or IPv6 literal, a host name, or "" / "*"
 * (every interface). */
static int check_listen(const char *s, char *why, size_t len) {
    unsigned char buf[16];
    if (!s[0] || strcmp(s, "*") == 0) return 0;
    if (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1) return 0;
    if (text_is_hostname(s, strlen(s))) return 0;
    snprintf(why, len, "\"%s\" is not an IPv4/IPv6 address, a host name or \"*\"", s);
    return 1;
}

/* server.proxy_protocol_from item: an address or a prefix. */
static int check_cidr(const char *s, char *why, size_t len) {
    srv_cidr c;
    if (srv_cidr_parse(s, &c) == 0) return 0;
    snprintf(why, len, "\"%s\" is not an IPv4/IPv6 address or prefix (a.b.c.d/n, x::/n, host bits zero)", s);
    return 1;
}

static const char *const default_listen[] = {"127.0.0.1", NULL};

/* server.allowed_origins item: "*", the keywords "same-origin" and
 * "localhost" (daemon/net/access.h says what they admit), or
 * scheme://host[:port] as browsers send it in the Origin header (no path,
 * no trailing slash). */
static int check_origin(const char *s, char *why, size_t len) {
    if (strcmp(s, "*") == 0 || strcmp(s, "same-origin") == 0 || strcmp(s, "localhost") == 0) return 0;
    const char *h = NULL;
    if (strncmp(s, "http://", 7) == 0) h = s + 7;
    else if (strncmp(s, "https://", 8) == 0) h = s + 8;
    if (!h) {
        snprintf(why, len, "\"%s\" is not \"*\" or an origin like https://example.com[:port] (or the keyword "
                 "\"same-origin\" or \"localhost\")", s);
        return 1;
    }
    const char *end;
    if (*h == '[') { /* [IPv6] */
        const char *close = strchr(h, ']');
        char a[64];
        size_t n = close ? (size_t)(close - h - 1) : 0;
        unsigned char buf[16];
        if (!close || n == 0 || n >= sizeof a) goto bad;
        memcpy(a, h + 1, n);
        a[n] = '\0';
        if (inet_pton(AF_INET6, a, buf) != 1) goto bad;
        end = close + 1;
    } else {
        end = h + strcspn(h, ":/");
        if (!text_is_hostname(h, (size_t)(end - h))) goto bad;
    }
    if (*end == ':') {
        char *pe;
        long port = strtol(end + 1, &pe, 10);
        if (pe == end + 1 || port < 1 || port > 65535 || end[1] == '+' || end[1] == '-') goto bad;
        end = pe;
    }
    if (*end == '\0') return 0;
bad:
    snprintf(why, len, "\"%s\" is not a valid origin (scheme://host[:port], no path)", s);
    return 1;
}

#define OFF(field) offsetof(cfg, field)
/* Where an option goes in app_opts (cfg_to_app): at[] holds offset + 1,
 * so that 0 means none. */
#define AT(field) (offsetof(app_opts, field) + 1)
#define TO(kind, field) .to = CFG_TO_##kind, .at = {AT(field)}
#define TO2(kind, field, field2) .to = CFG_TO_##kind, .at = {AT(field), AT(field2)}
#define TO_LIST(field, count) TO2(LIST, field, count)
#define TO_MAP(field, vals) .to = CFG_TO_INT, .at = {AT(field)}, .values = vals
#define NOWHERE .to = CFG_TO_NONE
#define OPT_CUSTOM(p, f, tgt, fl, ops, d) \
    {.path = p, .type = CFG_CUSTOM, .offset = OFF(f), tgt, .flags = fl, .custom = &ops, .doc = d}
#define OPT_INT(p, f, tgt, fl, def, lo, hi, d) \
    {.path = p, .type = CFG_INT, .offset = OFF(f), tgt, .flags = fl, .idef = def, .imin = lo, .imax = hi, .doc = d}
#define OPT_DBL(p, f, tgt, fl, def, lo, hi, d) \
    {.path = p, .type = CFG_DOUBLE, .offset = OFF(f), tgt, .flags = fl, .ddef = def, .dmin = lo, .dmax = hi, .doc = d}
#define OPT_BOOL(p, f, tgt, fl, def, d) \
    {.path = p, .type = CFG_BOOL, .offset = OFF(f), tgt, .flags = fl, .idef = def, .doc = d}
#define OPT_STR(p, f, tgt, fl, def, maxlen, chk, d)                                                         \
    {.path = p, .type = CFG_STRING, .offset = OFF(f), tgt, .flags = fl, .sdef = def, .max_len = maxlen, \
     .check = chk, .doc = d}
#define OPT_ENUM(p, f, tgt, fl, def, nm, d) \
    {.path = p, .type = CFG_ENUM, .offset = OFF(f), tgt, .flags = fl, .idef = def, .names = nm, .doc = d}
#define OPT_LIST(p, f, tgt, fl, def, maxlen, chk, d)                                                         \
    {.path = p, .type = CFG_STRLIST, .offset = OFF(f), tgt, .flags = fl, .ldef = def, .max_len = maxlen, \
     .check = chk, .doc = d}

#define R CFG_F_RELOAD
#define FILE_PATH (CFG_F_PATH | CFG_F_FILE)
#define DIR_PATH (CFG_F_PATH | CFG_F_DIR)

const cfg_option cfg_options[] = {
    OPT_LIST("server.listen", server.listen, TO_LIST(srv.listen, srv.nlisten),
        CFG_F_ONE, default_listen, TEXT_HOST_MAX, check_listen,
             "Addresses to listen on, each bound exactly (a string is a list of one): IPv4/IPv6 literals "
             "(\"127.0.0.1\", \"::1\", \"0.0.0.0\" = every IPv4 address, \"::\" = every IPv6 address), host names "
             "(every address they resolve to), or \"*\" alone for every interface of both families. An address "
             "that cannot be bound stops the start with the reason. The log and the printed URL show what the "
             "sockets are bound to."),
    OPT_INT("server.port", server.port, TO(INT, srv.port), 0, 8998, 0, 65535,
            "TCP port for HTTP and WebSocket; 0 picks a free port (logged at start)."),
    OPT_LIST("server.proxy_protocol_from", server.proxy_protocol_from, TO_LIST(srv.proxy_from, srv.nproxy_from),
        CFG_F_ONE, NULL, 64, check_cidr,
             "Proxies that send the PROXY protocol header (v1 or v2: HAProxy's send-proxy / send-proxy-v2) before "
             "each connection's bytes: addresses or prefixes (\"127.0.0.1\", \"10.0.0.0/8\", \"fd00::/8\"), at "
             "most 32. A connection from one of them must start with a header; the client address it names is "
             "then the connection's for the per-address limits and the logs; one without a valid header is "
             "closed. A PROXY header from any other address is refused (400, or a close). Empty = none "
             "(docs/security.md, \"Behind a reverse proxy\")."),
    OPT_STR("server.tls_cert", server.tls_cert, TO(STR, srv.tls_cert), FILE_PATH | R, "", PATH_MAX_BYTES, NULL,
            "PEM certificate chain; with server.tls_key the daemon serves https/wss only. On SIGHUP the pair is "
            "read again (new paths or new contents) for new connections; open ones keep theirs; a pair that "
            "does not load keeps the old one. Turning TLS on or off needs a restart."),
    OPT_STR("server.tls_key", server.tls_key, TO(STR, srv.tls_key), FILE_PATH | R, "", PATH_MAX_BYTES, NULL,
            "PEM private key of server.tls_cert (both or neither)."),
    OPT_STR("server.static_dir", server.static_dir, TO(STR_OR_NULL, srv.static_dir), DIR_PATH, "", PATH_MAX_BYTES, NULL,
            "Directory served at / (the browser client); empty = the installed page (PREFIX/share/moshid/web) "
            "or, from a build tree, daemon/web; when neither is there no files are served."),
    OPT_LIST("server.allowed_origins", server.allowed_origins, TO_LIST(origins, norigins),
        R, default_origins, ORIGIN_MAX, check_origin,
             "Browser pages (the Origin header) that may open sessions: \"same-origin\" (a page served by this "
             "listener: scheme, host and port of the Host header; by host name only with auth.tokens_file set, "
             "against DNS rebinding), \"localhost\" (http(s)://localhost, 127.0.0.1, [::1], any port), origins "
             "such as \"https://voice.example:8443\", or \"*\" (any page); others get 403. Upgrades without "
             "Origin (programs) are not judged by it (docs/security.md)."),
    OPT_BOOL("server.metrics", server.metrics, TO(INT, metrics), R, 1,
             "Serve Prometheus metrics at /metrics (false: 404)."),
    OPT_INT("server.handshake_timeout_ms", server.handshake_timeout_ms, TO(UNSIGNED, srv.handshake_timeout_ms),
        0, 5000, 100, 600000,
            "A connection that has not sent complete request headers (TLS handshake included) this long after "
            "accept, or after the last answer on a keep-alive connection, is closed."),
    OPT_INT("server.max_connections", server.max_connections, TO(UNSIGNED, srv.max_connections), 0, 0, 0, 4096,
            "Active connections (WebSocket sessions, static files being sent); more get 503. 0 = 2 x "
            "sessions.max + 16. /healthz, /metrics and /api/personas are answered whatever the count, and "
            "pending connections do not count: connections that send nothing starve neither them nor new "
            "sessions."),
    OPT_INT("server.max_connections_per_ip", server.max_connections_per_ip, TO(UNSIGNED, srv.max_connections_per_ip),
        0, 32, 1, 4096,
            "Active connections of one client address (as server.max_connections); more get 429. Behind a "
            "reverse proxy every client has the proxy's address: raise this, set server.conn_rate_per_ip to 0 "
            "(or the proxy's whole rate) and let the proxy limit each client."),
    OPT_INT("server.max_pending_handshakes", server.max_pending_handshakes, TO(UNSIGNED, srv.max_pending),
        0, 64, 1, 4096,
            "Connections without a complete request yet; a new one over this closes the oldest pending "
            "connection of the client address with the most (a bare close: it sent no request)."),
    OPT_INT("server.max_pending_per_ip", server.max_pending_per_ip, TO(UNSIGNED, srv.max_pending_per_ip),
        0, 16, 1, 4096,
            "Pending connections of one client address; a new one over this closes that address's oldest."),
    OPT_DBL("server.conn_rate_per_ip", server.conn_rate_per_ip, TO(DOUBLE, srv.conn_rate_per_ip),
        0, 50.0, 0.0, 100000.0,
            "New connections per second one client address may open (token bucket of "
            "server.conn_burst_per_ip); more are closed at accept. 0 = no limit. Addresses are tracked in a "
            "table of 4096 entries; an entry with no open connection is reused for a new address. For these "
            "and the other per-address limits an IPv6 client counts by its /64 prefix (one host holds a whole "
            "/64)."),
    OPT_INT("server.conn_burst_per_ip", server.conn_burst_per_ip, TO(UNSIGNED, srv.conn_burst_per_ip),
        0, 100, 1, 100000,
            "Connections one client address may open at once before server.conn_rate_per_ip applies."),

    OPT_STR("auth.tokens_file", auth.tokens_file, TO(STR, tokens_file), FILE_PATH | R, "", PATH_MAX_BYTES, NULL,
            "Bearer tokens, one NAME:TOKEN[:MAX_SESSIONS] line each (docs/security.md); every session must then "
            "present one (Authorization: Bearer, kyutai-api-key, or the auth / auth_id query parameter). Empty = "
            "no authentication: for a port only this machine reaches; set it whenever others can reach the port. "
            "Re-read on SIGHUP (a bad file keeps the tokens in force)."),
    OPT_BOOL("auth.protect_http", auth.protect_http, TO(INT, protect_http), R, 0,
             "With auth.tokens_file set, /metrics and /api/personas need a token as upgrades do "
             "(Authorization: Bearer, kyutai-api-key, or the auth / auth_id query parameter); others get 401. "
             "/healthz stays open. No effect without auth.tokens_file (a warning says so)."),

    OPT_STR("model.lm_dir", model.lm_dir, TO(STR, model.lm_dir), DIR_PATH | CFG_F_REQUIRED, "", PATH_MAX_BYTES, NULL,
            "LM checkpoint directory: model.safetensors and optional config.json (official names)."),
    OPT_STR("model.mimi", model.mimi, TO(STR, model.mimi), FILE_PATH | CFG_F_REQUIRED, "", PATH_MAX_BYTES, NULL,
            "Mimi codec weights (official safetensors)."),
    OPT_STR("model.mimi_config", model.mimi_config, TO(STR_OR_NULL, model.mimi_config),
        FILE_PATH, "", PATH_MAX_BYTES, NULL,
            "Optional JSON overriding Mimi hyper-parameters (small test codecs); empty = official values."),
    OPT_STR("model.tokenizer", model.tokenizer, TO(STR_OR_NULL, model.tokenizer),
        FILE_PATH | CFG_F_REQUIRED, "", PATH_MAX_BYTES, NULL,
            "SentencePiece tokenizer (.model)."),
    OPT_ENUM("model.variant", model.variant, TO_MAP(model.variant, cfg_variant_lm),
        0, CFG_VARIANT_AUTO, cfg_variant_names,
             "Checkpoint family; auto decides from the LM's config and tensors."),

    OPT_ENUM("engine.backend", engine.backend, TO(NAME, model.backend), 0, CFG_BACKEND_AUTO, cfg_backend_names,
             "auto: CUDA when its plugin loads, carries a backend table and sees a usable device, else the CPU (logged)."),
    OPT_INT("engine.gpu", engine.gpu, TO(INT, model.gpu), 0, 0, 0, 63,
            "CUDA device index (CUDA backend only)."),
    OPT_INT("engine.threads", engine.threads, TO(INT, model.threads), 0, 0, 0, 256,
            "Threads of the CPU backend; 0 = the number of online CPUs."),
    OPT_BOOL("engine.pipeline", engine.pipeline, TO(INT, model.pipeline), 0, 1,
             "Overlap each frame's Mimi decode with the next frame's encode and LM step (the CPU backend decodes "
             "on a thread of its own); false = the synchronous engine."),
    OPT_ENUM("engine.weights", engine.weights, TO(INT, model.weights), 0, 0, cfg_weights_names,
             "Linear layers' weights: stored (the checkpoint's dtype), bf16, or int8 (per output row with a float "
             "scale, quantized at load; Kyutai's q8 checkpoints run int8 as stored). Embeddings and norms stay "
             "as stored. The CPU and CUDA backends implement all three (docs/lm.md)."),
    OPT_ENUM("engine.kv", engine.kv, TO(INT, model.kv), 0, 0, cfg_kv_names,
             "K/V cache: native (the backend's own precision: float32 on the CPU, bf16 on the GPU) or int8 (one "
             "float scale per position and head: half the bytes of bf16, a quarter of float32)."),

    OPT_INT("sessions.max", sessions.max, TO(INT, model.slots), 0, 8, 1, 1024,
            "Concurrent sessions (engine slots, allocated at start); one more is told the server is busy."),

    OPT_DBL("sampling.text_temperature", sampling.text_temperature, TO(DOUBLE, text_temperature),
        R, SAMP_TEXT_TEMP, 0.0, PROTO_TEMPERATURE_MAX,
            "Default text temperature; 0 = greedy. Clients may override per session."),
    OPT_INT("sampling.text_topk", sampling.text_topk, TO(INT, text_topk), R, SAMP_TEXT_TOPK, 0, PROTO_TOPK_MAX,
            "Default text top-k; 0 = the whole vocabulary."),
    OPT_DBL("sampling.audio_temperature", sampling.audio_temperature, TO(DOUBLE, audio_temperature),
        R, SAMP_AUDIO_TEMP, 0.0, PROTO_TEMPERATURE_MAX,
            "Default audio temperature; 0 = greedy."),
    OPT_INT("sampling.audio_topk", sampling.audio_topk, TO(INT, audio_topk), R, SAMP_AUDIO_TOPK, 0, PROTO_TOPK_MAX,
            "Default audio top-k; 0 = the whole codebook."),

    OPT_INT("limits.max_message_bytes", limits.max_message_bytes, TO(SIZE, srv.max_message_bytes),
        0, 1 << 20, 4096, 64 << 20,
            "Largest WebSocket message accepted from a client, bytes; larger ones get an error and a close."),
    OPT_DBL("limits.input_buffer_s", limits.input_buffer_s, TO(DOUBLE, input_buffer_s), 0, 4.0, 0.5, 60.0,
            "Audio a client may send ahead of the engine, seconds (opusenc writes 1 s pages: keep >= 3)."),
    OPT_DBL("limits.output_queue_s", limits.output_queue_s, TO(DOUBLE, output_queue_s), R, 2.0, 0.2, 60.0,
            "Unsent output audio that closes a slow client, seconds."),
    OPT_INT("limits.idle_timeout_s", limits.idle_timeout_s, TO(DOUBLE, idle_timeout_s), R, 60, 0, 86400,
            "Close a session after this many seconds without an audio message from the client (other kinds, "
            "empty and unknown messages and WebSocket pings do not count); 0 = never."),
    OPT_INT("limits.close_timeout_s", limits.close_timeout_s, TO(I64, close_timeout_s), R, 5, 1, 60,
            "Hard deadline of a close the server decides (error, idle, shutdown), seconds: the error message, the queued output and the close handshake must be through by then, else the connection is dropped (the session's slot is freed at once either way)."),
    OPT_INT("limits.max_steps", limits.max_steps, TO(I64, max_steps), R, 0, 0, 1 << 24,
            "Longest session in 80 ms steps; 0 = no limit (past the model's context the K/V ring wraps, as in the "
            "official server); query max_steps may lower it, never raise it."),
    OPT_INT("limits.max_header_bytes", limits.max_header_bytes, TO(UNSIGNED, srv.max_header_bytes),
        0, 16384, 4096, 65535,
            "HTTP request header space, bytes (PersonaPlex prompts travel in the URL; libwebsockets keeps it in 16 bits)."),
    OPT_INT("limits.send_buffer_bytes", limits.send_buffer_bytes, TO(INT, srv.send_buffer_bytes),
        0, 65536, 4096, 16 << 20,
            "Kernel send buffer of each WebSocket, bytes: small, so that a client that does not read trips limits.output_queue_s within seconds."),

    OPT_INT("realtime.max_append_bytes", realtime.max_append_bytes, TO(I64, realtime.max_append_bytes),
        0, 262144, 160, 64 << 20,
            "/v1/realtime: most decoded audio bytes in one input_audio_buffer.append (or input_audio item); "
            "larger ones are refused with an error event (the session goes on). limits.max_message_bytes "
            "bounds the event itself."),
    OPT_INT("realtime.max_events_per_s", realtime.max_events_per_s, TO(I64, realtime.max_events_per_s),
        0, 200, 0, 100000,
            "/v1/realtime: client events per second a session may send (bursts of two seconds' worth pass); "
            "more closes it with 1008 and a reason; 0 = no limit."),
    OPT_INT("realtime.response_silence_ms", realtime.response_silence_ms, TO(I64, realtime.response_silence_ms),
        0, 800, 80, 10000,
            "/v1/realtime: the model's silence (no text token, quiet audio) that ends a response (response.done)."),
    OPT_INT("realtime.max_response_s", realtime.max_response_s, TO(I64, realtime.max_response_s), 0, 60, 1, 3600,
            "/v1/realtime: longest response, seconds: a model that keeps talking gets its response closed "
            "(transcript final) and a new one opened."),

    OPT_ENUM("audio.input_pre_skip", audio.input_pre_skip, TO_MAP(input_pre_skip, pre_skip_values),
        R, CFG_PRE_SKIP_IGNORE, cfg_pre_skip_names,
             "OpusHead pre-skip of client audio: ignore = feed every decoded sample to Mimi, as the official "
             "servers (sphn) do, so frames line up with theirs; rfc = drop it (RFC 7845). New sessions."),

    OPT_STR("personas.voices_dir", personas.voices_dir, TO(STR, personas.voices_dir),
        DIR_PATH | R, "", PATH_MAX_BYTES, NULL,
            "Directory of the voices a client may name with voice_prompt (NAME.safetensors, a converted .pt; "
            "NAME.pt, NVIDIA's voice file as published; or NAME.wav/.flac/.ogg); empty = voice_prompt refused."),
    OPT_BOOL("personas.on_demand", personas.on_demand, TO(INT, personas.on_demand), R, 1,
             "Accept voice_prompt/text_prompt: an uncached prompt is primed on demand (one prime slot each), then "
             "cached; false = only configured personas."),
    OPT_INT("personas.cache_bytes", personas.cache_bytes, TO(SIZE, personas.cache_bytes), R, 1LL << 30, 0, 1LL << 40,
            "Memory budget of the cached on-demand persona snapshots, bytes (least recently used evicted first; "
            "configured personas are pinned and not counted); 0 = keep none."),
    OPT_INT("personas.max_prompt_tokens", personas.max_prompt_tokens, TO(INT, personas.max_prompt_tokens),
        R, 1024, 1, 65536,
            "Most role-text tokens of one prime (after the `<system>` wrapper); longer prompts are refused."),
    OPT_DBL("personas.max_voice_s", personas.max_voice_s, TO(DOUBLE, personas.max_voice_s), R, 30.0, 0.5, 600.0,
            "Longest voice prompt, seconds (audio, or the frames of a saved voice); longer ones are refused."),
    OPT_INT("personas.max_concurrent_primes", personas.max_concurrent_primes, TO2(INT, personas.max_concurrent_primes, model.prime_slots),
        0, 1, 1, 16,
            "Primes at once: each has a backend slot of its own (sessions never get it, one session's K/V of "
            "memory); an on-demand prime over the cap is refused (1013)."),
    OPT_INT("personas.prime_chunk_positions", personas.prime_chunk_positions, TO(INT, model.prime_chunk),
        0, 16, 1, 4096,
            "Positions one chunk of a prime prefills between live frame steps (a chunk must cost well under a "
            "frame, 80 ms, on the backend)."),
    OPT_CUSTOM("personas.list", personas.list, TO(PTR, personas.list), R, cfg_personas_ops,
               "Personas primed at start-up (and on SIGHUP), restored into sessions that ask with persona=NAME."),

    OPT_ENUM("log.level", log.level, NOWHERE, R, MS_LOG_INFO, cfg_log_level_names,
             "Lowest level written to stderr."),

    OPT_STR("debug.record_dir", debug.record_dir, TO2(STR_OR_NULL, model.record_dir, personas.record_dir),
        DIR_PATH, "", PATH_MAX_BYTES, NULL,
            "Debugging: write each session's Mimi input codes and LM outputs there (moshi-run's formats); slow, empty = off."),
    OPT_INT("debug.step_delay_ms", debug.step_delay_ms, TO(INT, model.step_delay_ms), 0, 0, 0, 10000,
            "Test aid: every engine step (and persona prime chunk) sleeps this many ms, to make the engine fall "
            "behind on purpose (the overload and persona tests); 0 = off. Never set it in production."),

    OPT_ENUM("cuda.codec", cuda.codec, TO(INT, model.cuda.codec_host), 0, 0, cfg_codec_names,
             "CUDA backend: where the Mimi codec runs: device (kernels on the GPU, beside the LM) or host (the CPU "
             "Mimi, one stream per slot: for comparisons, or should the device codec misbehave). The environment "
             "variable MOSHID_CU_MIMI=cpu (host) or gpu (device) overrides it (docs/cuda.md)."),
    OPT_INT("cuda.gemm_min_rows", cuda.gemm_min_rows, TO(INT, model.cuda.gemm_min_rows), 0, 0, 0, LM_MAX_SLOTS + 1,
            "CUDA backend: rows (slots in a step) from which a linear layer runs as one GEMM rather than a matvec "
            "per row; 0 = the backend's own crossover. For measurements; MOSHID_CU_GEMM_MIN_ROWS=N overrides it."),
    OPT_BOOL("cuda.graphs", cuda.graphs, TO_MAP(model.cuda.graphs_off, graphs_off_values), 0, 1,
             "CUDA backend: replay each LM step from a captured CUDA graph (false: every launch enqueued, slower; "
             "for comparisons). MOSHID_CU_GRAPHS=0 or 1 overrides it."),
    OPT_BOOL("cuda.codec_graphs", cuda.codec_graphs, TO_MAP(model.cuda.codec_graphs_off, graphs_off_values), 0, 1,
             "CUDA backend: replay the device codec's calls from captured graphs (false: every launch enqueued). "
             "MOSHID_CU_MIMI_GRAPHS=0 or 1 overrides it."),
};
const size_t cfg_noptions = sizeof cfg_options / sizeof cfg_options[0];

int cfg_cross_check(const cfg *c, ms_error *err) {
    for (int i = 0; i < c->server.listen.n; i++) {
        const char *l = c->server.listen.v[i];
        if ((!l[0] || strcmp(l, "*") == 0) && c->server.listen.n > 1)
            return ms_err_set(err, MS_ERR_ARG, "server.listen: \"%s\" (every interface) cannot be listed with "
                              "other addresses", l);
    }
    if (c->server.proxy_protocol_from.n > SRV_MAX_PROXY_FROM)
        return ms_err_set(err, MS_ERR_LIMIT, "server.proxy_protocol_from: %d entries, more than %d",
                          c->server.proxy_protocol_from.n, SRV_MAX_PROXY_FROM);
    if (!c->server.tls_cert[0] != !c->server.tls_key[0])
        return ms_err_set(err, MS_ERR_ARG, "server.tls_cert, server.tls_key: set both or neither (%s is empty)",
                          c->server.tls_cert[0] ? "server.tls_key" : "server.tls_cert");
    return MS_OK;
}
