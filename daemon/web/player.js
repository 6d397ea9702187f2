// player.js - the model's audio: Ogg demux (ogg.js), Opus decoding with
// WebCodecs AudioDecoder, resampling to the AudioContext's rate, playback
// through the "moshid-playback" worklet (its jitter buffer).
//
// Chromium's Opus decoder gives 48 kHz AudioData whatever it was configured
// with: its sampleRate is read and converted.

import { OggReader, isOpusTags, opusPacketSamples48, parseOpusHead } from "./ogg.js";

export const JITTER = { targetMs: 80, maxTargetMs: 320, stepMs: 40, slackMs: 200 };

/** Streaming linear-interpolation resampler (mono). */
export class LinearResampler {
  constructor(inRate, outRate) {
    this.inRate = inRate;
    this.outRate = outRate;
    this.step = inRate / outRate;
    this.pos = 0; // position of the next output sample; index -1 is `last`
    this.last = 0;
  }

  /** Returns the output samples for input x (a Float32Array). */
  process(x) {
    if (this.inRate === this.outRate) return x;
    const n = x.length;
    if (!n) return new Float32Array(0);
    const out = new Float32Array(Math.ceil((n - this.pos) / this.step) + 1);
    let k = 0, p = this.pos;
    while (p < n - 1) {
      const i = Math.floor(p), f = p - i;
      const a = i < 0 ? this.last : x[i];
      out[k++] = a + (x[i + 1] - a) * f;
      p += this.step;
    }
    this.pos = p - n;
    this.last = x[n - 1];
    return out.subarray(0, k);
  }
}

/**
 * Handlers: onOutput(samples24) after every audio packet received
 * (samples24: model audio received so far, 24 kHz samples),
 * onStats(stats from the worklet), onError(Error).
 */
export class Player {
  constructor(ctx, handlers) {
    this.ctx = ctx;
    this.h = handlers;
    this.node = null;
    this.decoder = null;
    this.stats = { packets: 0, decoded: 0, badPages: 0 };
  }

  async init() {
    if (this.node) return;
    await this.ctx.audioWorklet.addModule(new URL("./playback-worklet.js", import.meta.url));
    this.node = new AudioWorkletNode(this.ctx, "moshid-playback", { numberOfInputs: 0, numberOfOutputs: 1,
      outputChannelCount: [1], processorOptions: JITTER });
    this.node.port.onmessage = (e) => this.h.onStats?.(e.data);
    this.node.connect(this.ctx.destination);
  }

  /** A new stream (a new session). */
  start() {
    this.stop();
    this.reader = new OggReader();
    this.head = null;
    this.tags = false;
    this.ts = 0; // µs
    this.received24 = 0;
    this.resampler = null;
    this.stats = { packets: 0, decoded: 0, badPages: 0 };
    this.node.port.postMessage({ reset: true });
  }

  stop() {
    if (this.decoder && this.decoder.state !== "closed") this.decoder.close();
    this.decoder = null;
  }

  /** The payload of one kind-1 message. */
  feed(bytes) {
    for (const p of this.reader.feed(bytes)) this._packet(p.data);
    this.stats.badPages = this.reader.badPages;
  }

  _packet(data) {
    if (!this.head) {
      const head = parseOpusHead(data);
      this.head = head || { channels: 1 };
      this._configure(this.head.channels === 2 ? 2 : 1);
      if (head) return;
    }
    if (!this.tags && isOpusTags(data)) { this.tags = true; return; }
    const n48 = opusPacketSamples48(data);
    if (!n48) return;
    const dur = (n48 * 1e6) / 48000;
    this.stats.packets++;
    if (this.decoder.state === "configured")
      this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: Math.round(this.ts),
        duration: Math.round(dur), data }));
    this.ts += dur;
    this.received24 += n48 / 2;
    this.h.onOutput?.(this.received24);
  }

  _configure(channels) {
    this.decoder = new AudioDecoder({
      output: (ad) => this._decoded(ad),
      error: (e) => this.h.onError?.(new Error(`Opus decoder: ${e.message}`)),
    });
    this.decoder.configure({ codec: "opus", sampleRate: 24000, numberOfChannels: channels });
  }

  _decoded(ad) {
    try {
      const n = ad.numberOfFrames, nch = ad.numberOfChannels;
      let mono = new Float32Array(n);
      const plane = new Float32Array(n);
      for (let c = 0; c < nch; c++) {
        ad.copyTo(plane, { planeIndex: c, format: "f32-planar" });
        for (let i = 0; i < n; i++) mono[i] += plane[i] / nch;
      }
      if (!this.resampler || this.resampler.inRate !== ad.sampleRate)
        this.resampler = new LinearResampler(ad.sampleRate, this.ctx.sampleRate);
      const out = this.resampler.process(mono);
      const pcm = out.length === out.buffer.byteLength / 4 ? out : out.slice();
      this.stats.decoded += n;
      this.node.port.postMessage({ pcm }, [pcm.buffer]);
    } finally {
      ad.close();
    }
  }
}
