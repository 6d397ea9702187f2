/* cfg.h - moshid's configuration: one table of options (cfg_table.c), walked
 * by the loader, by --dump-config, by reload and by the documentation
 * generator.
 *
 * The file is JSON with one object per section ({"server": {"port": 8998},
 * "log": {"level": "debug"}}); every option has a default, so "{}" is a
 * valid file. Unknown keys, duplicate keys, wrong types and values out of
 * bounds are refused with the key path and the reason. Relative paths in a
 * file are taken relative to the directory of that file.
 *
 * A struct cfg is owned by one thread (the loop thread in the daemon); the
 * engine thread gets copies of what it needs.
 */
#ifndef MOSHID_CFG_H
#define MOSHID_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

/* Largest configuration file accepted, bytes. */
#define CFG_MAX_FILE_BYTES (1024 * 1024)
/* Most entries in a string-list option. */
#define CFG_MAX_LIST 64
/* Size of the text buffers of a reload report, bytes. */
#define CFG_REPORT_MAX 2048

enum { CFG_VARIANT_AUTO, CFG_VARIANT_KYUTAI, CFG_VARIANT_PERSONAPLEX };
/* The lm_variant (lm_config.h) of each CFG_VARIANT_*. */
extern const int cfg_variant_lm[];
enum { CFG_BACKEND_AUTO, CFG_BACKEND_CPU, CFG_BACKEND_CUDA };
enum { CFG_PRE_SKIP_IGNORE, CFG_PRE_SKIP_RFC };

/* NULL-terminated names of the enum options, in enum order. */
extern const char *const cfg_variant_names[];
/* engine.weights / engine.kv: indexed by lm_weights (lm.h) / lm_kv (backend.h) */
extern const char *const cfg_weights_names[];
extern const char *const cfg_kv_names[];
extern const char *const cfg_backend_names[];
extern const char *const cfg_pre_skip_names[];
extern const char *const cfg_codec_names[];     /* cuda.codec: "device", "host" */
extern const char *const cfg_log_level_names[]; /* indexed by MS_LOG_* */

/* A list of strings owned by its cfg. */
typedef struct cfg_strlist {
    char **v;
    int n;
} cfg_strlist;

/* personas.list (cfg_persona.c): the personas primed at start-up. */
#define CFG_MAX_PERSONAS 64         /* entries in personas.list */
#define CFG_PERSONA_NAME_MAX 64     /* bytes of a name */
#define CFG_PERSONA_DESC_MAX 1024   /* bytes of a description */
#define CFG_PERSONA_TEXT_MAX 16384  /* bytes of a role text */
#define CFG_PERSONA_IDS_MAX 8192    /* entries of text_ids */
#define CFG_PERSONA_ID_MAX (1 << 20) /* largest id (the LM checks its text_card at start) */

/* One configured persona; strings owned (never NULL, "" = unset). */
typedef struct cfg_persona {
    char *name;                 /* [A-Za-z0-9_.-]+, not starting with '.' */
    char *description;          /* shown by /api/personas */
    char *voice;                /* path: a .safetensors saved voice or an audio file; "" = no voice phase */
    char *text;                 /* role text (wrapped in <system> tags at start); "" = none */
    int *text_ids;              /* (n_text_ids) pre-tokenized role text, or NULL */
    int n_text_ids;
    double text_temperature, audio_temperature;  /* sampling overrides; < 0 = not set */
    int64_t text_topk, audio_topk;               /* < 0 = not set */
} cfg_persona;

typedef struct cfg_personas {
    cfg_persona *v;
    int n;
} cfg_personas;

/* The effective configuration. Strings are owned (never NULL; "" means
 * unset); integers are int64_t whatever their range. Field names follow the
 * JSON paths: server.port is c.server.port. */
typedef struct cfg {
    struct {
        cfg_strlist listen;         /* addresses to bind (srv.h) */
        cfg_strlist proxy_protocol_from; /* proxies that send a PROXY header first */
        int64_t port;               /* TCP port; 0 = any free port */
        char *tls_cert, *tls_key;   /* PEM paths; both or neither */
        char *static_dir;           /* served at /; "" = none */
        cfg_strlist allowed_origins;
        bool metrics;               /* serve /metrics */
        /* connection-level defences (srv.h) */
        int64_t handshake_timeout_ms;   /* request headers within this of accept / the last answer */
        int64_t max_connections;        /* active (requests answered, WebSockets); 0 = 2 x sessions.max + 16 */
        int64_t max_connections_per_ip;
        int64_t max_pending_handshakes; /* connections without a complete request */
        int64_t max_pending_per_ip;
        double conn_rate_per_ip;        /* new connections per second of one IP; 0 = no limit */
        int64_t conn_burst_per_ip;
    } server;
    struct {
        char *tokens_file;          /* NAME:TOKEN[:MAX_SESSIONS] lines (access.h); "" = no authentication */
        bool protect_http;          /* /metrics and /api/personas need a token too */
    } auth;
    struct {
        char *lm_dir;               /* config.json + model.safetensors */
        char *mimi;                 /* Mimi safetensors */
        char *mimi_config;          /* optional Mimi JSON overrides */
        char *tokenizer;            /* SentencePiece .model */
        int variant;                /* CFG_VARIANT_* */
    } model;
    struct {
        int backend;                /* CFG_BACKEND_* */
        int64_t gpu;                /* CUDA device index */
        int64_t threads;            /* CPU backend threads; 0 = online CPUs */
        bool pipeline;              /* overlap a frame's decode with the next frame's step */
        int weights;                /* lm_weights: stored, bf16, int8 */
        int kv;                     /* lm_kv: native, int8 */
    } engine;
    struct {
        int64_t max;                /* concurrent sessions (engine slots) */
    } sessions;
    struct {
        double text_temperature;
        int64_t text_topk;
        double audio_temperature;
        int64_t audio_topk;
    } sampling;
    struct {
        int64_t max_message_bytes;
        double input_buffer_s;      /* audio time a client may run ahead */
        double output_queue_s;      /* unsent audio time before a close */
        int64_t idle_timeout_s;     /* 0 = none */
        int64_t close_timeout_s;    /* a server-side close: decided -> connection dropped */
        int64_t max_steps;          /* 0 = no limit */
        int64_t max_header_bytes;
        int64_t send_buffer_bytes;  /* SO_SNDBUF of each WebSocket */
    } limits;
    struct {                        /* /v1/realtime (docs/realtime.md) */
        int64_t max_append_bytes;   /* decoded audio of one append event */
        int64_t max_events_per_s;   /* client events per second (burst: 2 s worth); 0 = no limit */
        int64_t response_silence_ms; /* model silence that ends a response */
        int64_t max_response_s;     /* longest response before it is closed and a new one opens */
    } realtime;
    struct {
        int input_pre_skip;         /* CFG_PRE_SKIP_*: OpusHead pre-skip of client audio */
    } audio;
    struct {
        char *voices_dir;           /* voice_prompt files; "" = none */
        bool on_demand;             /* accept voice_prompt / text_prompt */
        int64_t cache_bytes;        /* budget of the on-demand snapshots */
        int64_t max_prompt_tokens;  /* role text tokens of one prime */
        double max_voice_s;         /* longest voice, seconds */
        int64_t max_concurrent_primes;  /* prime slots reserved in the backend */
        int64_t prime_chunk_positions;  /* positions per prime chunk (engine job) */
        cfg_personas list;          /* configured personas */
    } personas;
    struct {
        int level;                  /* MS_LOG_* */
    } log;
    struct {
        char *record_dir;           /* "" = off */
        int64_t step_delay_ms;      /* test aid: each engine step sleeps this long; 0 = off */
    } debug;
    struct {                        /* the CUDA backend (lm_gpu_opts, backend.h) */
        int codec;                  /* 0 = device, 1 = host (the CPU Mimi) */
        int64_t gemm_min_rows;      /* matvec/GEMM crossover, rows; 0 = the backend's own */
        bool graphs;                /* LM steps replayed from CUDA graphs */
        bool codec_graphs;          /* the device codec's calls replayed from graphs */
    } cuda;
} cfg;

/* cfg_init: set every option of c to its default. c needs cfg_close. */
void cfg_init(cfg *c);

/* cfg_close: free what c owns; c may then be cfg_init'ed again. Calling it
 * twice is harmless. */
void cfg_close(cfg *c);

/* cfg_load_buf: defaults, then the JSON text[0..len) on top, then checks.
 * name names the source in messages ("moshid.json"); base_dir (may be NULL)
 * is prepended to relative paths. On success *out holds the result (caller
 * cfg_closes it); on failure *out is left closed (cfg_close is harmless) and
 * err says "NAME: key.path: reason". No file system access. */
int cfg_load_buf(cfg *out, const char *text, size_t len, const char *name,
                 const char *base_dir, ms_error *err);

/* cfg_load_file: cfg_load_buf on the contents of path (a regular file of at
 * most CFG_MAX_FILE_BYTES), relative paths taken from path's directory. */
int cfg_load_file(cfg *out, const char *path, ms_error *err);

/* cfg_set: apply one "section.name=VALUE" assignment (the command line's
 * --set) to c; call cfg_validate after the last one (rules between options
 * such as "both TLS files or neither" are checked there). VALUE is taken as
 * text for string and enum options (unless it starts with '"': then it is a
 * JSON string), as JSON otherwise (8998, true, ["https://a.example"]).
 * Relative paths are taken from the working directory (made absolute). On
 * error c is
 * unchanged and err names the option and the reason. */
int cfg_set(cfg *c, const char *assignment, ms_error *err);

/* cfg_validate: the rules between options (cfg_load_* apply them too). */
int cfg_validate(const cfg *c, ms_error *err);

/* cfg_copy: a deep copy of src into dst (dst's old contents are not
 * freed: pass a closed or fresh cfg). dst needs cfg_close. */
void cfg_copy(cfg *dst, const cfg *src);

/* cfg_check_files: the checks that need the file system, run before
 * serving and by --check-config: required model paths set, files readable,
 * directories present. */
int cfg_check_files(const cfg *c, ms_error *err);

/* cfg_dump: the whole configuration as JSON text (every option, defaults
 * included, table order), NUL-terminated, owned by the caller (free()).
 * NULL when out of memory. Loading it back gives an equal configuration. */
char *cfg_dump(const cfg *c);

/* cfg_equal: true when every option of a and b has the same value. */
bool cfg_equal(const cfg *a, const cfg *b);

/* What a reload did. Each text is "path: old -> new" lines. */
typedef struct cfg_reload_report {
    int n_changed;                  /* reloadable options changed (applied) */
    int n_refused;                  /* other options changed (not applied) */
    char changed[CFG_REPORT_MAX];
    char refused[CFG_REPORT_MAX];
} cfg_reload_report;

/* cfg_apply_reload: copy into cur every reloadable option whose value in
 * next differs, and list in rep what changed and which changes to options
 * that need a restart were refused (cur keeps those values). next is only
 * read. Returns the number of refused changes. Loop thread. */
int cfg_apply_reload(cfg *cur, const cfg *next, cfg_reload_report *rep);

/* cfg_reload_file: load path (as cfg_load_file) and cfg_apply_reload it.
 * When the file does not load, nothing changes and err says why. */
int cfg_reload_file(cfg *cur, const char *path, cfg_reload_report *rep,
                    ms_error *err);

struct app_opts;

/* cfg_to_app: write every option of c into o (daemon/app.h) through the
 * table (each row names its app_opts field); with reload_only, only the
 * options reload applies (CFG_F_RELOAD), the other fields of o are left
 * as they are. Strings and lists are borrowed from c. Fields of o that no
 * option names are not touched. */
void cfg_to_app(const cfg *c, struct app_opts *o, bool reload_only);

/* cfg_write_doc: the option reference in Markdown (the generated part of
 * docs/configuration.md): one table per section. */
void cfg_write_doc(FILE *f);

#endif
