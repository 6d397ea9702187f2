// wire_gen.js - written by `make web-gen` (daemon/web_gen.c) from proto/msg.h,
// proto/query.h and daemon/net/access.h: edit those, not this file.

// WebSocket close statuses (proto/msg.h, PROTO_CLOSE_CODES).
export const CLOSE = {
  NORMAL: 1000,
  GOING_AWAY: 1001,
  PROTOCOL_ERROR: 1002,
  ABNORMAL: 1006,
  BAD_DATA: 1007,
  POLICY: 1008,
  TOO_BIG: 1009,
  INTERNAL: 1011,
  TRY_LATER: 1013,
};

// Largest text_temperature / audio_temperature (PROTO_TEMPERATURE_MAX).
export const TEMPERATURE_MAX = 5;

// Largest text_topk / audio_topk (PROTO_TOPK_MAX; the server checks a
// query's against the model's cards).
export const TOPK_MAX = 1048576;

// An access token's length, bytes (ACCESS_TOKEN_MIN, ACCESS_TOKEN_MAX).
export const TOKEN_MIN = 16;
export const TOKEN_MAX = 256;
