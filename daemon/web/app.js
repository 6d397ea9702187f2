// app.js - moshid's page: the form, the session's life cycle, what the user
// sees. Audio in: mic.js; audio out: player.js; framing: protocol.js.
//
// window.__moshidStats is a test hook (tests/browser/): the page's counters,
// updated as things happen; nothing reads it back.

import { Mic } from "./mic.js";
import { Player, JITTER } from "./player.js";
import { ChatSocket, SAMPLING_PARAMS, TOKEN_RE, chatUrl, describeClose, samplingValue } from "./protocol.js";
import { RoundTrip, lagFrames } from "./latency.js";

const $ = (id) => document.getElementById(id);
const STORE_KEY = "moshid.settings";
// The access token, apart from the settings (docs/security.md: kept in
// this browser's local storage, sent as the auth query parameter).
const TOKEN_KEY = "moshid.token";
const UI_PERIOD_MS = 200;
// A live session sends audio every 80 ms: this long without a message means the
// connection is dead even if the socket has not noticed (the Kyutai web client
// uses the same 10 s).
const STALL_MS = 10000;
const TARGET_RATE = 24000; // the model's rate; the AudioContext runs at it where it can

const stats = {
  state: "idle", blocked: null, alert: null, alertKind: null, handshake: false, meta: null, variant: null,
  personas: null, personasStatus: null, url: null, authRequired: null,
  contextRate: null, micSettings: null, micRms: 0, captured: 0,
  sentPages: 0, sentBytes: 0, sentSamples: 0,
  recvAudioMessages: 0, recvPackets: 0, recvSamples: 0, decodedSamples: 0, badPages: 0,
  played: 0, playedAudio: 0, playRms: 0, bufferedMs: 0, targetMs: JITTER.targetMs, underruns: 0, dropped: 0,
  text: "", textPieces: 0, serverErrors: [], close: null,
  latencyMs: null, latencyMeanMs: null, latencyMinMs: null, latencyN: 0, lagFrames: null,
};
window.__moshidStats = stats;

let ctx = null, player = null, mic = null, sock = null;
let lastServerError = null, outLevel = 0, primed = false;
const rt = new RoundTrip();

// ---- what the user sees ---------------------------------------------------

const STATE_LABEL = { idle: "idle", connecting: "connecting", preparing: "preparing the session", live: "live",
  closing: "closing", error: "error" };

function setState(s, label) {
  stats.state = s;
  const el = $("state");
  el.dataset.state = s;
  el.textContent = label || STATE_LABEL[s];
  const active = s === "connecting" || s === "preparing" || s === "live";
  const btn = $("connect");
  btn.textContent = active ? "Disconnect" : "Connect";
  btn.classList.toggle("stop", active);
  btn.disabled = !!stats.blocked || s === "closing";
  for (const id of ["token", "persona", "voice", "role", ...SAMPLING_PARAMS.map((p) => p.name)])
    $(id).disabled = active || (id === "persona" && !(stats.personas && stats.personas.length)) ||
      ((id === "voice" || id === "role") && !!$("persona").value);
}

function showAlert(kind, text) {
  const el = $("alert");
  el.className = `alert ${kind}`;
  el.textContent = text;
  el.hidden = false;
  stats.alert = text;
  stats.alertKind = kind;
}

function clearAlert() {
  $("alert").hidden = true;
  stats.alert = stats.alertKind = null;
}

function dbfs(rms) { return rms > 1e-6 ? 20 * Math.log10(rms) : -120; }
function levelWidth(rms) { return `${Math.max(0, Math.min(100, ((dbfs(rms) + 60) / 60) * 100)).toFixed(0)}%`; }

function showLevel(barId, textId, rms) {
  $(barId).style.width = levelWidth(rms);
  $(textId).textContent = rms > 1e-6 ? `${dbfs(rms).toFixed(0)} dBFS` : "-";
}

function appendText(piece) {
  const t = $("transcript");
  const stick = t.scrollTop + t.clientHeight >= t.scrollHeight - 4;
  t.append(piece);
  if (stick) t.scrollTop = t.scrollHeight;
  stats.text += piece;
  stats.textPieces++;
}

function transcriptBreak() {
  const t = $("transcript");
  if (!t.textContent) return;
  const s = document.createElement("span");
  s.className = "sep";
  s.textContent = `- new session, ${new Date().toLocaleTimeString()} -`;
  t.append(s);
}

function showServer(m) {
  const s = m.sampling || {};
  $("model").textContent = `${m.variant || "?"} on ${m.backend || "?"}`;
  const who = `${m.server || "?"} ${m.build || ""}${m.instance ? " (" + m.instance + ")" : ""}`;
  $("server").textContent = `${who} · sampling: ` +
    `text ${s.text_temperature} / top-${s.text_topk}, audio ${s.audio_temperature} / top-${s.audio_topk}`;
}

function refreshFacts() {
  if (sock && stats.state === "live" && performance.now() - sock.lastRecvMs > STALL_MS)
    fail(`Connection lost: nothing from the server for ${STALL_MS / 1000} s.`);
  stats.latencyMs = rt.last;
  stats.latencyMeanMs = rt.mean;
  stats.latencyMinMs = rt.min;
  stats.latencyN = rt.n;
  stats.lagFrames = rt.lag;
  $("latency").textContent = rt.mean === null ? "-"
    : `${rt.mean.toFixed(0)} ms (last ${rt.last.toFixed(0)}, min ${rt.min.toFixed(0)})`;
  $("buffer").textContent = stats.state === "live" || stats.playedAudio
    ? `${stats.bufferedMs.toFixed(0)} ms (target ${stats.targetMs.toFixed(0)}, ${stats.underruns} underruns)` : "-";
  showLevel("out-level", "out-db", outLevel);
}

// ---- settings ---------------------------------------------------------------

function setVariant(v) {
  stats.variant = v || null;
  $("pp-form").hidden = v !== "personaplex";
  rt.lag = lagFrames(v, primed);
}

function loadSettings() {
  let s = {};
  try { s = JSON.parse(localStorage.getItem(STORE_KEY) || "{}") || {}; } catch { s = {}; }
  for (const id of ["voice", "role", ...SAMPLING_PARAMS.map((p) => p.name)])
    if (typeof s[id] === "string") $(id).value = s[id];
  return s;
}

function saveSettings() {
  const s = { persona: $("persona").value };
  for (const id of ["voice", "role", ...SAMPLING_PARAMS.map((p) => p.name)]) s[id] = $(id).value;
  try { localStorage.setItem(STORE_KEY, JSON.stringify(s)); } catch { /* private mode */ }
}

function loadToken() {
  try { $("token").value = localStorage.getItem(TOKEN_KEY) || ""; } catch { /* private mode */ }
}

function saveToken(t) {
  try { if (t) localStorage.setItem(TOKEN_KEY, t); } catch { /* private mode */ }
}

/** The query parameters of a new session; throws on a bad value. */
function sessionParams() {
  const q = {};
  if (stats.authRequired) {
    const t = $("token").value.trim();
    if (!t) throw new Error("This server requires an access token: enter the one its operator gave you.");
    if (!TOKEN_RE.test(t))
      throw new Error("The access token is 16 to 256 letters, digits, '.', '_', '~' or '-': check what you typed.");
    q.auth = t; // browsers cannot set headers on a WebSocket upgrade
  }
  for (const p of SAMPLING_PARAMS) {
    const v = samplingValue(p, $(p.name).value);
    if (v !== null) q[p.name] = String(v);
  }
  const persona = $("persona").value;
  if (persona) {
    q.persona = persona;
  } else if (!$("pp-form").hidden) {
    const voice = $("voice").value.trim(), role = $("role").value.trim();
    if (voice) {
      if (/[/\\:]|^\.|\.\./.test(voice) || [...voice].some((c) => c < " "))
        throw new Error("voice: a file name inside the server's voice directory is needed (no /, \\, : or ..)");
      q.voice_prompt = voice;
    }
    if (role) q.text_prompt = role;
  }
  return q;
}

async function loadPersonas(saved) {
  const sel = $("persona"), note = $("persona-note");
  let list = [];
  try {
    // with auth.protect_http the list needs the token too (a plain fetch can send the header)
    let t = "";
    try { t = localStorage.getItem(TOKEN_KEY) || ""; } catch { /* private mode */ }
    const headers = t && TOKEN_RE.test(t) ? { Authorization: `Bearer ${t}` } : {};
    const r = await fetch("/api/personas", { cache: "no-store", headers });
    stats.personasStatus = r.status;
    if (r.ok) {
      const j = await r.json();
      list = Array.isArray(j) ? j : j && Array.isArray(j.personas) ? j.personas : [];
    }
  } catch {
    stats.personasStatus = "unreachable";
  }
  list = list.filter((p) => p && typeof p.name === "string" && p.name);
  stats.personas = list.map((p) => p.name);
  for (const p of list) {
    const o = document.createElement("option");
    o.value = p.name;
    o.textContent = p.description ? `${p.name} - ${p.description}` : p.name;
    o.title = p.description || "";
    sel.append(o);
  }
  if (saved && list.some((p) => p.name === saved)) sel.value = saved;
  note.textContent = list.length ? "" : stats.personasStatus === 401
    ? "The persona list needs the access token: enter it, start once, then reload the page."
    : "This server offers no personas.";
  sel.onchange = () => { describePersona(list); setState(stats.state); };
  describePersona(list);
  setState(stats.state);
}

function describePersona(list) {
  const p = list.find((x) => x.name === $("persona").value);
  if (p) $("persona-note").textContent = p.description || "";
  else if (list.length) $("persona-note").textContent = "";
}

async function loadHealth() {
  try {
    const r = await fetch("/healthz", { cache: "no-store" }); // 503 when full: the body still says the variant
    const j = await r.json();
    if (!stats.meta) setVariant(j.variant);
    stats.authRequired = j.auth_required === true;
    $("token-row").hidden = !stats.authRequired;
  } catch { /* not moshid, or down: the metadata will tell */ }
}

// ---- capabilities -------------------------------------------------------------

function insecureText() {
  return `This page came over plain http from ${location.host}, which browsers do not trust with a microphone ` +
    "(only https pages and http://localhost get one). Serve moshid over TLS: set server.tls_cert and " +
    `server.tls_key in its configuration (PEM certificate and key) and open https://${location.host}/ ` +
    "(or reach it through an SSH tunnel on localhost).";
}

async function webCodecsMissing() {
  if (typeof AudioEncoder === "undefined" || typeof AudioDecoder === "undefined" ||
      typeof EncodedAudioChunk === "undefined" || typeof AudioData === "undefined")
    return "This browser has no WebCodecs audio (AudioEncoder/AudioDecoder), which the page needs for Opus; " +
      "some Safari versions lack it. Use a current Chrome, Edge, Firefox or Safari.";
  try {
    const cfg = { codec: "opus", sampleRate: TARGET_RATE, numberOfChannels: 1 };
    const [e, d] = await Promise.all([AudioEncoder.isConfigSupported(cfg), AudioDecoder.isConfigSupported(cfg)]);
    if (!e.supported || !d.supported)
      return "This browser's WebCodecs cannot encode or decode Opus at 24 kHz mono; " +
        "use a current Chrome, Edge, Firefox or Safari.";
  } catch (err) {
    return `This browser's WebCodecs refused Opus: ${err.message}`;
  }
  return null;
}

function micErrorText(e) {
  switch (e && e.name) {
  case "NotAllowedError": case "SecurityError":
    return "Microphone access was denied. Allow the microphone for this site (the icon in the address bar, " +
      "or the browser's site settings), then press Connect again.";
  case "NotFoundError": case "OverconstrainedError":
    return "No microphone was found. Plug one in (or pick one in the system's sound settings) and connect again.";
  case "NotReadableError": case "AbortError":
    return "The microphone could not be started: another program may hold it, or the device failed.";
  default:
    return `The microphone could not be started: ${e && e.message ? e.message : e}`;
  }
}

// ---- a session ---------------------------------------------------------------------

/** A context at the model's rate where the browser allows it, else at the device's (deviceRate: at once). */
function makeContext(deviceRate) {
  if (!deviceRate) {
    try { return new AudioContext({ sampleRate: TARGET_RATE, latencyHint: "interactive" }); } catch { /* below */ }
  }
  return new AudioContext({ latencyHint: "interactive" }); // the encoder then runs at the device's rate
}

function teardown() {
  if (mic) { mic.close(); mic = null; }
  if (player) player.stop();
  showLevel("mic-level", "mic-db", 0);
}

function fail(text) {
  showAlert("error", text);
  if (sock) { sock.onFail = true; sock.close(); }
  teardown();
  setState("error");
}

function micFailed(e) {
  teardown();
  setState("error");
  showAlert("error", micErrorText(e));
}

async function resetContext() {
  teardown();
  const old = ctx;
  ctx = null;
  player = null;
  if (old) await old.close().catch(() => {});
}

/** The AudioContext, the player and the microphone (throws getUserMedia's errors). */
async function openAudio(deviceRate = false) {
  if (!ctx) ctx = makeContext(deviceRate);
  await ctx.resume();
  stats.contextRate = ctx.sampleRate;
  if (!player) player = new Player(ctx, {
    onOutput: (n) => {
      stats.recvPackets = player.stats.packets;
      stats.recvSamples = n;
      rt.received(n, performance.now());
    },
    onStats: (s) => {
      stats.played = s.played; stats.playedAudio = s.audio; stats.playRms = s.rms; stats.underruns = s.underruns;
      stats.dropped = s.dropped; stats.bufferedMs = (s.buffered * 1000) / ctx.sampleRate;
      stats.targetMs = (s.target * 1000) / ctx.sampleRate; stats.decodedSamples = player.stats.decoded;
      stats.badPages = player.stats.badPages;
      outLevel = s.level;
    },
    onError: (e) => fail(e.message),
  });
  await player.init();
  mic = new Mic(ctx, {
    onLevel: (rms) => {
      if (stats.state === "live" || stats.state === "preparing") showLevel("mic-level", "mic-db", rms);
    },
    onPage: (page, samples24) => {
      if (!sock || !sock.sendAudio(page)) return;
      stats.sentPages++;
      stats.sentBytes = sock.sentBytes;
      stats.sentSamples = samples24;
      stats.micRms = mic.sentRms;
      stats.captured = mic.stats.captured;
      rt.sent(samples24, performance.now());
    },
    onError: (e) => fail(e.message),
  });
  await mic.open();
  stats.micSettings = mic.settings;
}

async function connect() {
  clearAlert();
  let params;
  try { params = sessionParams(); } catch (e) { showAlert("error", e.message); return; }
  saveSettings();
  if (params.auth) saveToken(params.auth);
  setState("connecting", "starting the microphone");
  lastServerError = null;
  try {
    await openAudio();
  } catch (e) {
    if (e && e.name === "NotSupportedError" && ctx && ctx.sampleRate === TARGET_RATE) {
      // Browsers that cannot feed a microphone into a context at another rate
      // than the device's: run at the device's rate (Opus takes 48 kHz too).
      await resetContext();
      try { await openAudio(true); } catch (e2) { return micFailed(e2); }
    } else {
      return micFailed(e);
    }
  }
  player.start();
  primed = !!(params.persona || params.voice_prompt || params.text_prompt);
  rt.reset(lagFrames(stats.variant, primed));
  transcriptBreak();
  Object.assign(stats, { handshake: false, meta: null, close: null, sentPages: 0, sentBytes: 0, sentSamples: 0 });
  const url = chatUrl(location, params);
  stats.url = url.replace(/([?&]auth=)[^&]*/, "$1..."); // the test hook never holds the token
  setState("connecting");
  const s = new ChatSocket(url, {
    onOpen: () => setState("preparing"),
    onMetadata: (m) => { stats.meta = m; setVariant(m.variant); showServer(m); },
    onHandshake: async () => {
      stats.handshake = true;
      setState("live");
      try { await mic.startStream(); } catch (e) { fail(`Opus encoder: ${e.message}`); }
    },
    onAudio: (b) => { stats.recvAudioMessages++; player.feed(b); },
    onText: appendText,
    onError: (t) => { lastServerError = t; stats.serverErrors.push(t); },
    onClose: (c) => {
      stats.close = { code: c.code, reason: c.reason };
      if (sock !== s) return; // an older socket
      sock = null;
      teardown();
      if (s.onFail) return; // fail() said why
      const d = describeClose(c, lastServerError, url, !!stats.authRequired);
      setState(d.kind === "error" ? "error" : "idle");
      showAlert(d.kind, d.text);
    },
  });
  sock = s;
}

function disconnect() {
  if (!sock) { teardown(); setState("idle"); return; }
  setState("closing");
  sock.close();
}

// ---- start ----------------------------------------------------------------------------

async function main() {
  const saved = loadSettings();
  loadToken();
  setState("idle");
  $("connect").onclick = () => (sock ? disconnect() : connect());
  window.addEventListener("pagehide", () => { if (sock) sock.close(); });
  setInterval(refreshFacts, UI_PERIOD_MS);
  if (!window.isSecureContext) {
    stats.blocked = "insecure";
    showAlert("error", insecureText());
  } else {
    const missing = await webCodecsMissing();
    if (missing) { stats.blocked = "webcodecs"; showAlert("error", missing); }
  }
  setState("idle");
  await Promise.all([loadHealth(), loadPersonas(saved.persona)]);
}

main();
