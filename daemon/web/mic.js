// mic.js - the microphone: getUserMedia (echo cancellation, noise
// suppression, automatic gain), capture in an AudioWorklet, Opus encoding
// with WebCodecs AudioEncoder, Ogg pages of our own writer (ogg.js).
//
// The AudioContext runs at 24 kHz where the browser allows it, so the
// worklet's chunks are 24 kHz mono and the encoder takes them as they are.
// Each 20 ms Opus packet becomes one Ogg page, handed to onPage as soon as
// the encoder gives it (the header pages first).

import { OggOpusWriter, opusPacketSamples48 } from "./ogg.js";

export const CAPTURE_CHUNK_MS = 20;
// Opus encoder settings: 20 ms frames (what the official web clients send).
const OPUS_BITRATE = 32000;
const OPUS_FRAME_US = 20000;
// OpusHead pre-skip, 48 kHz samples: libopus's look-ahead, 6.5 ms at any rate
// (RFC 7845 counts it at 48 kHz; Chromium's own OpusHead says 156, the
// 24 kHz count). moshid ignores it by default (audio.input_pre_skip).
const OPUS_PRE_SKIP_48K = 312;
// Encoder input rates Opus takes (the context's rate must be one of them).
const OPUS_RATES = [8000, 12000, 16000, 24000, 48000];
// Chunks allowed to wait in the encoder before new ones are dropped.
const MAX_ENCODE_QUEUE = 50;

export const MIC_CONSTRAINTS = {
  audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
  video: false,
};

/** Opus encoder configuration for the given input rate. */
export function encoderConfig(rate) {
  return { codec: "opus", sampleRate: rate, numberOfChannels: 1, bitrate: OPUS_BITRATE,
    opus: { frameDuration: OPUS_FRAME_US, application: "voip" } };
}

/**
 * Handlers: onLevel(rms, peak) for every capture chunk (20 ms),
 * onPage(oggPage, samples24) for every page to send (samples24: audio
 * samples at 24 kHz in the pages so far), onError(Error).
 */
export class Mic {
  constructor(ctx, handlers) {
    this.ctx = ctx;
    this.h = handlers;
    this.stream = null;
    this.node = null;
    this.encoder = null;
    this.writer = null;
    this.rate = ctx.sampleRate;
    this.stats = { captured: 0, sumsq: 0, encoded: 0, pages: 0, dropped: 0 };
  }

  /** Opens the microphone (throws the getUserMedia error as it is). */
  async open() {
    if (!OPUS_RATES.includes(this.rate))
      throw new Error(`the audio context runs at ${this.rate} Hz, which Opus does not take`);
    this.stream = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
    await this.ctx.audioWorklet.addModule(new URL("./capture-worklet.js", import.meta.url));
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.ctx, "moshid-capture", { numberOfInputs: 1, numberOfOutputs: 1,
      outputChannelCount: [1], processorOptions: { chunk: Math.round((this.rate * CAPTURE_CHUNK_MS) / 1000) } });
    this.node.port.onmessage = (e) => this._chunk(e.data);
    this.source.connect(this.node);
    this.node.connect(this.ctx.destination); // outputs silence; keeps the worklet running
    const track = this.stream.getAudioTracks()[0];
    this.settings = track ? track.getSettings() : {};
    if (track) track.onended = () => this.h.onError?.(new Error("the microphone stopped (unplugged or revoked)"));
  }

  /** Starts encoding and sending (after the handshake). */
  async startStream() {
    const cfg = encoderConfig(this.rate);
    let use = cfg;
    const sup = await AudioEncoder.isConfigSupported(cfg).catch(() => ({ supported: false }));
    if (!sup.supported) use = { codec: "opus", sampleRate: this.rate, numberOfChannels: 1, bitrate: OPUS_BITRATE };
    this.writer = null;
    this.samples = 0;
    this.sent24 = 0;
    this.encoder = new AudioEncoder({
      output: (chunk) => this._packet(chunk),
      error: (e) => this.h.onError?.(new Error(`Opus encoder: ${e.message}`)),
    });
    this.encoder.configure(use);
  }

  stopStream() {
    if (this.encoder && this.encoder.state !== "closed") this.encoder.close();
    this.encoder = null;
  }

  close() {
    this.stopStream();
    if (this.node) { this.node.port.onmessage = null; this.node.disconnect(); }
    if (this.source) this.source.disconnect();
    if (this.stream) for (const t of this.stream.getTracks()) { t.onended = null; t.stop(); }
    this.node = this.source = this.stream = null;
  }

  _chunk({ pcm, rms, peak }) {
    this.h.onLevel?.(rms, peak);
    const enc = this.encoder;
    if (!enc || enc.state !== "configured") return;
    this.stats.captured += pcm.length;
    this.stats.sumsq += rms * rms * pcm.length;
    if (enc.encodeQueueSize > MAX_ENCODE_QUEUE) { this.stats.dropped += pcm.length; return; }
    const ad = new AudioData({ format: "f32-planar", sampleRate: this.rate, numberOfFrames: pcm.length,
      numberOfChannels: 1, timestamp: Math.round((this.samples * 1e6) / this.rate), data: pcm });
    this.samples += pcm.length;
    enc.encode(ad);
    ad.close();
  }

  _packet(chunk) {
    if (!this.writer) {
      this.writer = new OggOpusWriter({ channels: 1, preSkip48: OPUS_PRE_SKIP_48K, inputRate: this.rate });
      for (const p of this.writer.headerPages()) this._send(p);
    }
    const data = new Uint8Array(chunk.byteLength);
    chunk.copyTo(data);
    this.stats.encoded++;
    this.sent24 += opusPacketSamples48(data) / 2;
    this._send(this.writer.audioPage([data]));
  }

  _send(page) {
    this.stats.pages++;
    this.h.onPage?.(page, this.sent24);
  }

  /** RMS of the captured audio sent to the encoder so far. */
  get sentRms() { return Math.sqrt(this.stats.sumsq / Math.max(1, this.stats.captured)); }
}
