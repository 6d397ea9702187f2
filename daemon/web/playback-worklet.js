// playback-worklet.js - AudioWorklet processor "moshid-playback": plays the
// decoded model audio (mono, the AudioContext's rate) from a small jitter
// buffer.
//
// - Playback starts once `target` ms are buffered (80 ms at first).
// - Underrun (less than a render block plus a fade left): what is left fades
//   out to zero over the block, playback stops until `target` ms are
//   buffered again, then fades in; each underrun raises `target` by `stepMs`,
//   up to `maxTargetMs`.
// - Bounded: when more than target + `slackMs` is buffered, the oldest
//   samples are dropped down to target (counted as dropped).
// Messages in: {pcm: Float32Array} appends; {reset: true} empties.
// Messages out, every ~100 ms: {played (samples rendered), audio (of them
// from the buffer), rms (of those), level (rms of the last ~100 ms rendered),
// buffered, target, underruns, dropped, playing}; counts since the page loaded.

const FADE_MS = 5;

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    const ms = (v) => Math.round((v * sampleRate) / 1000);
    this.target = ms(o.targetMs || 80);
    this.maxTarget = ms(o.maxTargetMs || 320);
    this.step = ms(o.stepMs || 40);
    this.slack = ms(o.slackMs || 200);
    this.fade = Math.max(1, ms(FADE_MS));
    this.cap = this.maxTarget + this.slack + ms(200);
    this.ring = new Float32Array(this.cap);
    this.r = 0; // read index
    this.len = 0; // samples buffered
    this.playing = false;
    this.gain = 0; // fade-in state, 0..1
    this.played = 0; // samples rendered (silence included)
    this.audio = 0; // samples rendered from the buffer
    this.sumsq = 0;
    this.recentSumsq = 0; // since the last report (the level meter)
    this.underruns = 0;
    this.dropped = 0;
    this.sinceReport = 0;
    this.port.onmessage = (e) => {
      if (e.data.reset) { this.len = 0; this.playing = false; this.gain = 0; return; }
      if (e.data.pcm) this.push(e.data.pcm);
    };
  }

  push(pcm) {
    let n = pcm.length, off = 0;
    if (n > this.cap) { off = n - this.cap; this.dropped += off; n = this.cap; }
    if (this.len + n > this.target + this.slack) { // bounded: drop the oldest down to target
      const drop = Math.min(this.len, this.len + n - this.target);
      this.r = (this.r + drop) % this.cap;
      this.len -= drop;
      this.dropped += drop;
    }
    let w = (this.r + this.len) % this.cap;
    for (let i = 0; i < n; i++) {
      this.ring[w] = pcm[off + i];
      if (++w === this.cap) w = 0;
    }
    this.len += n;
  }

  process(inputs, outputs) {
    const out = outputs[0];
    const ch0 = out[0];
    const n = ch0.length;
    if (!this.playing && this.len >= this.target) { this.playing = true; this.gain = 0; }
    if (this.playing) {
      if (this.len >= n + this.fade) {
        for (let i = 0; i < n; i++) {
          if (this.gain < 1) this.gain = Math.min(1, this.gain + 1 / this.fade);
          const x = this.ring[this.r] * this.gain;
          if (++this.r === this.cap) this.r = 0;
          ch0[i] = x;
          this.sumsq += x * x;
          this.recentSumsq += x * x;
        }
        this.len -= n;
        this.audio += n;
      } else { // underrun: fade out what is left, then wait for target again
        const k = Math.min(this.len, n);
        for (let i = 0; i < k; i++) {
          const x = this.ring[this.r] * this.gain * (1 - (i + 1) / k);
          if (++this.r === this.cap) this.r = 0;
          ch0[i] = x;
          this.sumsq += x * x;
          this.recentSumsq += x * x;
        }
        this.len -= k;
        this.audio += k;
        this.playing = false;
        this.gain = 0;
        this.underruns++;
        this.target = Math.min(this.maxTarget, this.target + this.step);
      }
    }
    for (let c = 1; c < out.length; c++) out[c].set(ch0);
    this.played += n;
    this.sinceReport += n;
    if (this.sinceReport >= sampleRate / 10) {
      const level = Math.sqrt(this.recentSumsq / this.sinceReport);
      this.sinceReport = 0;
      this.recentSumsq = 0;
      this.port.postMessage({ played: this.played, audio: this.audio, level,
        rms: Math.sqrt(this.sumsq / Math.max(1, this.audio)),
        buffered: this.len, target: this.target, underruns: this.underruns, dropped: this.dropped,
        playing: this.playing });
    }
    return true;
  }
}

registerProcessor("moshid-playback", PlaybackProcessor);
