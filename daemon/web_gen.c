/* web_gen.c - moshid-web-gen: prints daemon/web/wire_gen.js, the facts of
 * the wire that the browser page needs before it connects (close statuses,
 * the temperature and top-k bounds, the token syntax), from the C headers that define
 * them, so that the page holds no copy. `make web-gen` rewrites the file;
 * tests/cli/web_gen.sh fails when it is stale. */
#include <stdio.h>

#include "access.h"
#include "msg.h"
#include "query.h"

#define CLOSE_JS(name, code) printf("  %s: %d,\n", #name, code);

int main(void) {
    printf("// wire_gen.js - written by `make web-gen` (daemon/web_gen.c) from proto/msg.h,\n"
           "// proto/query.h and daemon/net/access.h: edit those, not this file.\n\n");
    printf("// WebSocket close statuses (proto/msg.h, PROTO_CLOSE_CODES).\nexport const CLOSE = {\n");
    PROTO_CLOSE_CODES(CLOSE_JS)
    printf("};\n\n");
    printf("// Largest text_temperature / audio_temperature (PROTO_TEMPERATURE_MAX).\n"
           "export const TEMPERATURE_MAX = %g;\n\n", PROTO_TEMPERATURE_MAX);
    printf("// Largest text_topk / audio_topk (PROTO_TOPK_MAX; the server checks a\n"
           "// query's against the model's cards).\n"
           "export const TOPK_MAX = %d;\n\n", PROTO_TOPK_MAX);
    printf("// An access token's length, bytes (ACCESS_TOKEN_MIN, ACCESS_TOKEN_MAX).\n"
           "export const TOKEN_MIN = %d;\nexport const TOKEN_MAX = %d;\n", ACCESS_TOKEN_MIN, ACCESS_TOKEN_MAX);
    return ferror(stdout) ? 1 : 0;
}
