// protocol.js - moshid's /api/chat framing as the page speaks it
// (docs/protocol.md section 2): every message binary, byte 0 the kind.
// The page sends only what the Kyutai web client sends (kind-1 audio after
// the handshake): nothing new on the wire. The close statuses, the
// temperature bound and the token syntax come from wire_gen.js, generated
// from the C headers (make web-gen).

import { CLOSE, TEMPERATURE_MAX, TOKEN_MAX, TOKEN_MIN, TOPK_MAX } from "./wire_gen.js";

export const KIND = { HANDSHAKE: 0, AUDIO: 1, TEXT: 2, CONTROL: 3, METADATA: 4, ERROR: 5, PING: 6 };

// WebSocket close statuses the server uses (docs/protocol.md section 8).
export { CLOSE };

// Sampling parameters the page may send, with the ranges of
// docs/protocol.md section 7 (top-k: at least 1, the server checks the
// upper bound against the model's cards).
export const SAMPLING_PARAMS = [
  { name: "text_temperature", min: 0, max: TEMPERATURE_MAX, integer: false },
  { name: "text_topk", min: 1, max: TOPK_MAX, integer: true },
  { name: "audio_temperature", min: 0, max: TEMPERATURE_MAX, integer: false },
  { name: "audio_topk", min: 1, max: TOPK_MAX, integer: true },
];

// An access token as auth.tokens_file holds them (daemon/net/access.h):
// TOKEN_MIN to TOKEN_MAX of the characters that travel unchanged in a URL.
export const TOKEN_RE = new RegExp(`^[A-Za-z0-9._~-]{${TOKEN_MIN},${TOKEN_MAX}}$`);

/** ws: or wss: URL of /api/chat on the page's own origin, with the query. */
export function chatUrl(loc, params) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  const q = new URLSearchParams(params).toString();
  return `${scheme}//${loc.host}/api/chat${q ? "?" + q : ""}`;
}

/**
 * Checks one sampling value typed by the user; returns null when empty,
 * the number when valid, or throws an Error naming the parameter.
 */
export function samplingValue(p, text) {
  const t = String(text).trim();
  if (t === "") return null;
  const re = p.integer ? /^[0-9]+$/ : /^[0-9]+(\.[0-9]+)?$/;
  const v = Number(t);
  if (!re.test(t) || !(v >= p.min && v <= p.max))
    throw new Error(`${p.name}: ${p.integer ? "an integer" : "a number"} from ${p.min}` +
      `${p.max < TOPK_MAX ? " to " + p.max : ""} is needed, not "${t}"`);
  return v;
}

const utf8 = new TextDecoder("utf-8");

/**
 * One session over a WebSocket. Handlers (all optional): onOpen(),
 * onMetadata(obj), onHandshake(), onAudio(Uint8Array), onText(string),
 * onError(string) (kind 5), onClose({code, reason, wasClean, opened}).
 */
export class ChatSocket {
  constructor(url, handlers) {
    this.h = handlers;
    this.opened = false;
    this.closedByUs = false;
    this.sentBytes = 0;
    this.sentMessages = 0;
    this.recvMessages = 0;
    this.lastRecvMs = performance.now();
    this.ignored = 0;
    this.ws = new WebSocket(url);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => { this.opened = true; this.h.onOpen?.(); };
    this.ws.onmessage = (e) => this._message(e.data);
    this.ws.onclose = (e) => this.h.onClose?.({ code: e.code, reason: e.reason, wasClean: e.wasClean,
      opened: this.opened, byUs: this.closedByUs });
    this.ws.onerror = () => {}; // the close event that follows says what happened
  }

  _message(data) {
    if (!(data instanceof ArrayBuffer) || data.byteLength === 0) { this.ignored++; return; }
    this.recvMessages++;
    this.lastRecvMs = performance.now();
    const b = new Uint8Array(data);
    const payload = b.subarray(1);
    switch (b[0]) {
    case KIND.HANDSHAKE: this.h.onHandshake?.(); break;
    case KIND.AUDIO: this.h.onAudio?.(payload); break;
    case KIND.TEXT: this.h.onText?.(utf8.decode(payload)); break;
    case KIND.METADATA: {
      let meta = null;
      try { meta = JSON.parse(utf8.decode(payload)); } catch { this.ignored++; break; }
      this.h.onMetadata?.(meta);
      break;
    }
    case KIND.ERROR: this.h.onError?.(utf8.decode(payload)); break;
    default: this.ignored++; // ping, control, kinds of later servers
    }
  }

  /** Sends one kind-1 message holding the given Ogg bytes. */
  sendAudio(oggBytes) {
    if (this.ws.readyState !== WebSocket.OPEN) return false;
    const m = new Uint8Array(1 + oggBytes.length);
    m[0] = KIND.AUDIO;
    m.set(oggBytes, 1);
    this.ws.send(m);
    this.sentBytes += m.length;
    this.sentMessages++;
    return true;
  }

  /** Bytes queued in the browser and not yet sent. */
  get bufferedAmount() { return this.ws.bufferedAmount; }

  close() {
    this.closedByUs = true;
    if (this.ws.readyState === WebSocket.CONNECTING || this.ws.readyState === WebSocket.OPEN)
      this.ws.close(CLOSE.NORMAL, "client left");
  }
}

/**
 * What the user should read about a close: {text, kind} where kind is
 * "info" (an end the user asked for or a normal end) or "error".
 * serverError: the last kind-5 text (longer than the close reason).
 */
export function describeClose(c, serverError, url, authRequired = false) {
  const why = serverError || c.reason;
  if (c.byUs) return { kind: "info", text: "Disconnected." };
  switch (c.code) {
  case CLOSE.NORMAL: return { kind: "info", text: why ? `Session ended: ${why}` : "The server ended the session." };
  case CLOSE.TRY_LATER: {
    const text = `The server cannot take this session now: ${why || "busy"}`;
    return { kind: "error", text: /try again/i.test(text) ? text : `${text}. Try again in a moment.` };
  }
  case CLOSE.GOING_AWAY: return { kind: "error", text: `The server is going away: ${why || "shutting down"}.` };
  case CLOSE.POLICY: case CLOSE.TOO_BIG: case CLOSE.INTERNAL:
    return { kind: "error", text: `The server closed the session: ${why || "status " + c.code}` };
  default:
    // Browsers do not show the HTTP answer of a refused upgrade (401 for a
    // token, 429 for a token's session limit, 403 for an origin).
    if (!c.opened && authRequired)
      return { kind: "error", text: `Cannot connect to ${url.split("?")[0]}: the server refused the WebSocket. ` +
        "Check the access token (a wrong or withdrawn token, or one whose session limit is reached, is refused); " +
        "else the server is not reachable, the page's origin is not allowed, or the certificate is not trusted." };
    if (!c.opened)
      return { kind: "error", text: `Cannot connect to ${url.split("?")[0]}: the server is not reachable, ` +
        "or it refused the WebSocket (server.allowed_origins, or a certificate the browser does not trust)." };
    if (why) return { kind: "error", text: `The session ended: ${why}` };
    return { kind: "error", text: `Connection lost (status ${c.code}): the network or the server went away. ` +
      "Connect again when it is back." };
  }
}
