// latency.js - round-trip latency from the audio itself: the time from
// sending the Ogg page that completes input frame k (1920 samples, 80 ms at
// 24 kHz) to receiving the page that completes output frame k - lag, the
// model's answer to it. lag is the model's delay in frames (docs/protocol.md
// section 3): 1 with Kyutai's step, 2 with PersonaPlex's, 0 with
// PersonaPlex's after a persona or prompt was primed (the prime filled the
// delays: measured on the demo model, N input frames give N output frames).
// moshid does not answer the ping kind, so this needs nothing on the wire.

export const FRAME_SAMPLES = 1920;
const WINDOW = 25; // frames in the running mean (2 s)

/**
 * Model delay in frames for a variant ("kyutai", "personaplex", from the
 * metadata or /healthz) and whether the session asked for a persona or an
 * on-demand prompt.
 */
export function lagFrames(variant, primed) {
  if (variant === "personaplex") return primed ? 0 : 2;
  return 1;
}

export class RoundTrip {
  constructor() { this.reset(1); }

  reset(lag) {
    this.lag = lag;
    this.sendT = []; // ms, per completed input frame
    this.inFrames = 0;
    this.outFrames = 0;
    this.recent = [];
    this.last = null;
    this.n = 0;
    this.min = null;
  }

  /** samples24: input audio sent so far (24 kHz samples); t: performance.now(). */
  sent(samples24, t) {
    while ((this.inFrames + 1) * FRAME_SAMPLES <= samples24) { this.sendT.push(t); this.inFrames++; }
  }

  /** samples24: model audio received so far; t: performance.now(). */
  received(samples24, t) {
    while ((this.outFrames + 1) * FRAME_SAMPLES <= samples24) {
      const k = this.outFrames + this.lag;
      this.outFrames++;
      if (k >= this.sendT.length) continue;
      const ms = t - this.sendT[k];
      this.last = ms;
      this.n++;
      this.min = this.min === null ? ms : Math.min(this.min, ms);
      this.recent.push(ms);
      if (this.recent.length > WINDOW) this.recent.shift();
    }
  }

  /** Mean of the last WINDOW measurements, or null. */
  get mean() {
    return this.recent.length ? this.recent.reduce((a, b) => a + b, 0) / this.recent.length : null;
  }
}
